# Probe variants of the instrumented kernel (timing only; V2's results are wrong by design).
s = open('sak_tl.cuh').read()
relax = s.replace('''  cluster.sync();
  TL(10);''', '''  asm volatile("barrier.cluster.arrive.relaxed.aligned;\\n" ::: "memory");
  asm volatile("barrier.cluster.wait.aligned;\\n" ::: "memory");
  TL(10);''')
assert relax != s
open('sak_tl_relax.cuh', 'w').write(relax)
local = relax.replace('cluster.map_shared_rank(&s_lse[0], src)[hh]', '(&s_lse[0])[hh + (src & 0)]')
local = local.replace('cluster.map_shared_rank(&s_red[0][0][0], src)[hh * (D + 8) + d]', '(&s_red[0][0][0])[hh * (D + 8) + d + (src & 0)]')
assert local.count('map_shared_rank') == 0, local.count('map_shared_rank')
open('sak_tl_local.cuh', 'w').write(local)
