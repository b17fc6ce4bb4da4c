import re,collections,sys
d=collections.defaultdict(lambda: collections.defaultdict(list)); hs=collections.defaultdict(set)
v=None; order=[]
for l in open(sys.argv[1]):
    if l.startswith('== '):
        v=l.split()[1]
        if v not in order: order.append(v)
        continue
    m=re.match(r'ctx\s+(\d+) B\s+(\d+) (\S+)\s+(\S+): index median\s+([\d.]+).*topk (\S+)',l)
    if m:
        k=(int(m[1]),int(m[2]),m[3],m[4]); d[k][v].append(float(m[5])); hs[k].add(m[6])
print('case'.ljust(26),' '.join(x.rjust(13) for x in order),' hashes')
for k in d:
    print(str(k).ljust(26),' '.join(('/'.join('%.1f'%t for t in d[k][x])).rjust(13) for x in order), len(hs[k]))
