s=open('../src/cuda/index_topk_kernels.cuh').read()
s=s.replace('#pragma once','#pragma once\n#define TLD(k, dep) do { if (threadIdx.x == 0 && (long long)(dep) != 0x7fffffffffffll) { unsigned long long t_; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)); g_tl[(blockIdx.z*gridDim.y+blockIdx.y)*gridDim.x*8+blockIdx.x*8+(k)] = t_; } } while (0)\n#define TL(k) TLD(k, 0)\n',1)
def rep(old,new,cnt=1):
    global s
    assert old in s, old[:60]
    s=s.replace(old,new,cnt)
rep('''  __shared__ SelectSmem sm;
  select_row_topk(prm, blockIdx.x, blockIdx.y, sm);''','''  __shared__ SelectSmem sm;
  TL(0);
  select_row_topk(prm, blockIdx.x, blockIdx.y, sm);
  TL(4);''')
rep('''  // f(block, key) over this thread's range''','''  TLD(1, keys[0]);
  // f(block, key) over this thread's range''')
rep('''  int32_t count = 0;
  for_each_key''','''  TLD(2, threshold);
  int32_t count = 0;
  for_each_key''')
i=s.index('index_score_mma_kernel(const IndexScoreParams prm) {')
head,tail=s[:i],s[i:]
tail=tail.replace('''  const uint2* q_frag = reinterpret_cast<const uint2*>(q_s);
''','''  const uint2* q_frag = reinterpret_cast<const uint2*>(q_s);
  TL(0);
''',1)
tail=tail.replace('''      block_max[i] = ordered_f32(-INFINITY);
    }
    __syncthreads();
''','''      block_max[i] = ordered_f32(-INFINITY);
    }
    __syncthreads();
    TL(1);
''',1)
tail=tail.replace('''      have = have_next;
      raw = next;
    }
    __syncthreads();
''','''      have = have_next;
      raw = next;
    }
    __syncthreads();
    TL(2);
''',1)
tail=tail.replace('''    row0 = row1;
  }
}''','''    row0 = row1;
  }
  TL(4);
}''',1)
open('ik_tl.cuh','w').write(head+tail)
