# Host simulation of tournament_threshold (variant-tournament.diff): 8 warps of 32 lanes sort
# their keys with the same bitonic network, offer their 16 largest, and merge pairs of lists as
# the kernel does; the result must be the kept-th largest key. Run: python3 simulate_tournament.py
import random


def tournament(keys, kept):
    buf = [0] * 256
    for w in range(8):
        v = list(keys[w * 32:(w + 1) * 32])
        size = 2
        while size <= 32:
            stride = size >> 1
            while stride > 0:
                nv = v[:]
                for lane in range(32):
                    other = v[lane ^ stride]
                    take_min = ((lane & stride) == 0) == ((lane & size) == 0)
                    nv[lane] = min(v[lane], other) if take_min else max(v[lane], other)
                v = nv
                stride >>= 1
            size <<= 1
        for lane in range(16, 32):
            buf[w * 16 + (31 - lane)] = v[lane]
    src, dst, lists = 0, 128, 8
    while lists > 1:
        for w in range(lists // 2):
            m = [max(buf[src + 2 * w * 16 + i], buf[src + (2 * w + 1) * 16 + 15 - i]) for i in range(16)]
            stride = 8
            while stride > 0:
                m = [max(m[i], m[i ^ stride]) if (i & stride) == 0 else min(m[i], m[i ^ stride])
                     for i in range(16)]
                stride >>= 1
            buf[dst + w * 16:dst + w * 16 + 16] = m
        src, dst, lists = dst, src, lists // 2
    return buf[src + kept - 1]


random.seed(1)
checked = 0
for _ in range(3000):
    nvb = random.randint(2, 256)
    keys = random.sample(range(1, 1 << 62), nvb) + [0] * (256 - nvb)
    kept = min(random.randint(1, 16), nvb - 1)
    assert tournament(keys, kept) == sorted(keys, reverse=True)[kept - 1]
    checked += 1
print(f"ok: {checked} random rows")
