p='sak_tl.cuh'; s=open('../src/cuda/sparse_attention_kernels.cuh').read()
s=s.replace('#pragma once','#pragma once\n#define TLD(k, dep) do { if (threadIdx.x == 0 && (long long)(dep) != 0x7fffffffffffll) { unsigned long long t_; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)); g_tl[(blockIdx.z*gridDim.y+blockIdx.y)*gridDim.x*8+blockIdx.x*8+(k)] = t_; } } while (0)\n#define TL(k) TLD(k, 0)\n',1)
def rep(old,new):
    global s
    assert old in s, old[:60]
    s=s.replace(old,new,1)
rep('  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n  const int g = lane >> 2, c = lane & 3;\n  const int64_t row = blockIdx.x;','  TL(0);\n  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n  const int g = lane >> 2, c = lane & 3;\n  const int64_t row = blockIdx.x;')
rep('''  const float k_layer = prm.scale_mode''','''  TL(1);
  const float k_layer = prm.scale_mode''')
rep('''  // One CTA per (row, KV head) reports bad values''','''  TL(2);
  // One CTA per (row, KV head) reports bad values''')
rep('''  const int64_t own = live ? pos / bs : -1;
''','''  const int64_t own = live ? pos / bs : -1;
  TLD(3, own);
''')
rep('''  // The row's selection as a set: ids beyond''','''  TLD(4, q_frag[0][0].x);
  // The row's selection as a set: ids beyond''')
rep('''      if (lane == 0) s_nsel = __popc(firsts);''','''      if (lane == 0) s_nsel = __popc(firsts);
      TLD(5, firsts);''')
rep('''  const int n_sel = s_nsel;''','''  const int n_sel = s_nsel;
  TL(6);''')
rep('''  // Merge the 4 warps' partial softmax states in fixed warp order.''','''  TLD(7, acc[0][0]);
  // Merge the 4 warps' partial softmax states in fixed warp order.''')
open(p,'w').write(s)
