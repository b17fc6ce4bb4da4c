# Instrumented copy of src/cuda/sparse_attention_kernels.cuh: %globaltimer stamps per CTA phase
# (thread 0), written to g_tl[cta * 16 + marker].
p = 'sak_tl.cuh'
s = open("../../src/cuda/sparse_attention_kernels.cuh").read()
s = s.replace('#pragma once', '''#pragma once
#define TLD(k, dep) do { if (threadIdx.x == 0 && (long long)(dep) != 0x7fffffffffffll) { \\
  unsigned long long t_; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)); \\
  g_tl[((blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x) * 16 + (k)] = t_; } } while (0)
#define TL(k) TLD(k, 0)
''', 1)
def rep(old, new):
    global s
    assert old in s, old[:70]
    s = s.replace(old, new, 1)
rep('''  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int64_t row = blockIdx.x;''', '''  TL(0);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int64_t row = blockIdx.x;''')
rep('''  const float k_layer = prm.scale_mode''', '''  TL(1);
  const float k_layer = prm.scale_mode''')
rep('''  // One CTA per (row, KV head) reports bad values''', '''  TL(2);
  // One CTA per (row, KV head) reports bad values''')
rep('''  const int64_t own = live ? pos / bs : -1;
''', '''  const int64_t own = live ? pos / bs : -1;
  TLD(3, own);
''')
rep('''  // The row's selection as a set: ids beyond''', '''  TLD(4, q_frag[0][0].x);
  // The row's selection as a set: ids beyond''')
rep('''        if (lane == 0) s_nsel = __popc(valid);''', '''        if (lane == 0) s_nsel = __popc(valid);
        TLD(5, valid);''')
rep('''  const int n_sel = s_nsel;''', '''  const int n_sel = s_nsel;
  TL(6);''')
rep('''    while (i < sub_end) {
      Tile next;
      step(cur, next);
      cur = next;
    }''', '''    bool first_done = false;
    while (i < sub_end) {
      Tile next;
      step(cur, next);
      if (!first_done) TLD(7, acc[0][0]);
      first_done = true;
      cur = next;
    }''')
rep('''  // Merge the 4 warps' partial softmax states in fixed warp order.''', '''  TLD(8, acc[0][0]);
  // Merge the 4 warps' partial softmax states in fixed warp order.''')
rep('''  // Thread t sums dim t % D of heads''', '''  TL(9);
  // Thread t sums dim t % D of heads''')
rep('''  cluster.sync();
  const int splits = prm.splits;''', '''  cluster.sync();
  TL(10);
  const int splits = prm.splits;''')
rep('''  // No CTA may exit while another still reads its shared memory.''', '''  TL(11);
  // No CTA may exit while another still reads its shared memory.''')
rep('''  asm volatile("barrier.cluster.wait.aligned;\\n" ::: "memory");
}''', '''  asm volatile("barrier.cluster.wait.aligned;\\n" ::: "memory");
  TL(12);
}''')
open(p, 'w').write(s)
