#!/usr/bin/env python3
"""merge_runs_model.py — the steps of src/cp/merge_runs.cu (the merge's `runs` kernel) replayed in
Python for one row at a time, CTA by CTA and thread by thread (the same slices, digit passes, group
and bin find, list starts, gathering and placing), against a brute-force reference of dsa.h's
contract; on the CPU, in well under a second. For checking a change to the kernel's steps before
it reaches a GPU; it does not run the CUDA code. Keep it in step with the kernel.

    python3 dev/merge_runs_model.py
"""
import random, struct, math
M64=(1<<64)-1
def score_key(f):
    if f!=f: return 0
    u=struct.unpack('<I',struct.pack('<f',f))[0]
    if u==0x80000000: u=0
    return (~u)&0xffffffff if u&0x80000000 else u|0x80000000
def make_comp(key,i): return (key<<32)|((~i)&0xffffffff)
THREADS,ITEMS=256,8; SLICE=THREADS*ITEMS; BINS=2048; GROUPS=64
def clz32(x): return 32 if x==0 else 32-x.bit_length()
def run(W,k_in,topk,sc,ids):
    n=W*k_in; C=(n+SLICE-1)//SLICE
    # per CTA, per thread candidates
    c=[[ [0]*ITEMS for t in range(THREADS)] for r in range(C)]
    for r in range(C):
        for t in range(THREADS):
            f0=r*SLICE+t*ITEMS
            for u in range(ITEMS):
                f=f0+u
                if f<n:
                    w,j=divmod(f,k_in)
                    if ids[w][j]>=0: c[r][t][u]=make_comp(score_key(sc[w][j]),ids[w][j])
    vals=[x for r in range(C) for t in range(THREADS) for x in c[r][t] if x]
    valid=len(vals); k=min(topk,valid)
    kmin=min((x>>32) for x in vals) if vals else 0xffffffff
    kmax=max((x>>32) for x in vals) if vals else 0
    kbase=(kmin<<32)&M64
    T=0; passes=0
    if k<valid:
        span=(kmax-kmin)&0xffffffff
        sh=max(0,(32-clz32(span))-11)
        need=k; shift=64
        while True:
            width=11 if shift==64 else min(11,shift)
            nsh=32+sh if shift==64 else shift-width
            dmask=(1<<width)-1
            hist=[[0]*BINS for r in range(C)]
            for r in range(C):
                for t in range(THREADS):
                    for x in c[r][t]:
                        oc=(x-kbase)&M64
                        if x and (shift==64 or (oc>>shift)==(T>>shift)):
                            hist[r][(oc>>nsh)&dmask]+=1
            group=[[sum(hist[r][32*g:32*g+32]) for g in range(GROUPS)] for r in range(C)]
            # warp 0 find
            va=[sum(group[r][GROUPS-1-2*l] for r in range(C)) for l in range(32)]
            vb=[sum(group[r][GROUPS-2-2*l] for r in range(C)) for l in range(32)]
            s=[va[l]+vb[l] for l in range(32)]
            incl=[sum(s[:l+1]) for l in range(32)]
            hits=[l for l in range(32) if incl[l]>=need]
            bin_,above,in_bin=0,0,need
            if hits:
                l=hits[0]; before=incl[l]-s[l]; a_l=va[l]
                in_a=before+a_l>=need
                g=GROUPS-1-2*l if in_a else GROUPS-2-2*l
                above_g=before if in_a else before+a_l
                v=[sum(hist[r][32*g+31-ln] for r in range(C)) for ln in range(32)]
                incl2=[sum(v[:ln+1]) for ln in range(32)]
                h2=[ln for ln in range(32) if above_g+incl2[ln]>=need]
                l2=h2[0] if h2 else 31
                bin_=32*g+31-l2; above=above_g+incl2[l2]-v[l2]
                in_bin=v[l2] if h2 else need-above
            need-=above; T|=bin_<<nsh; shift=nsh; passes+=1
            if in_bin==need or shift==0: break
    # gather
    masks=[[sum(1<<u for u in range(ITEMS) if c[r][t][u] and ((c[r][t][u]-kbase)&M64)>=T) for t in range(THREADS)] for r in range(C)]
    excl=[]; cta_sel=[]; below=[]
    for r in range(C):
        cnt=[bin(masks[r][t]).count('1') for t in range(THREADS)]
        e=[sum(cnt[:t]) for t in range(THREADS)]; excl.append(e); cta_sel.append(sum(cnt))
        slice0=r*SLICE; slice_len=max(0,min(SLICE,n-slice0))
        bl=[None]*(W+1)
        for w in range(W+1):
            b=w*k_in-slice0
            if b<=0 or b>=slice_len: bl[w]=0 if b<=0 else sum(cnt)
            else:
                t=b//ITEMS; bl[w]=e[t]+bin(masks[r][t]&((1<<(b%ITEMS))-1)).count('1')
        below.append(bl)
    tot=sum(cta_sel); offs=[sum(cta_sel[:r]) for r in range(C)]
    m=min(tot,k)
    ls=[min(sum(below[r][w] for r in range(C)),min(tot,k)) for w in range(W+1)]
    cat=[None]*2048
    for r in range(C):
        for t in range(THREADS):
            o=offs[r]+excl[r][t]
            for u in range(ITEMS):
                if masks[r][t]>>u&1:
                    if o<m: cat[o]=(~c[r][t][u])&0xffffffff
                    o+=1
    unsorted=False
    for i in range(max(0,m-1)):
        boundary=any(i+1==ls[w] for w in range(1,W))
        if not boundary and cat[i]>cat[i+1]: unsorted=True
    out=[None]*topk
    if not unsorted:
        steps=max(ls[v+1]-ls[v] for v in range(W)).bit_length()
        for r in range(C):
            for i in range(offs[r],min(offs[r]+cta_sel[r],m)):
                x=cat[i]; w=sum(1 for v in range(1,W) if i>=ls[v])
                base=[ls[v] if v<W else 0 for v in range(8)]
                ln=[ls[v+1]-base[v] if (v<W and v!=w) else 0 for v in range(8)]
                bound=[x+(1 if v<w else 0) for v in range(8)]
                for step in range(steps):
                    for v in range(8):
                        half=ln[v]>>1; y=cat[min(base[v]+half,2047)]
                        lower= ln[v]>0 and y<bound[v]
                        if lower: base[v]+=half+1; ln[v]-=half+1
                        else: ln[v]=half
                pos=i-ls[w]+sum(base[v]-ls[v] for v in range(W) if v!=w)
                assert out[pos] is None, "collision"
                out[pos]=x
    else:
        srt=sorted(cat[:m])
        for i in range(m): out[i]=srt[i]
    for i in range(m,topk): out[i]=-1
    return out,m,passes,unsorted,C
def ref(W,k_in,topk,sc,ids):
    comps=[make_comp(score_key(sc[w][j]),ids[w][j]) for w in range(W) for j in range(k_in) if ids[w][j]>=0]
    comps.sort(reverse=True); k=min(topk,len(comps))
    sel=sorted(((~x)&0xffffffff) for x in comps[:k])
    return sel+[-1]*(topk-k),k
def case(W,k_in,topk,kind,asc,seed):
    rnd=random.Random(seed)
    span=W*k_in*3; perm=list(range(span)); rnd.shuffle(perm)
    ids=[[perm[w*k_in+j] for j in range(k_in)] for w in range(W)]
    sc=[[0.0]*k_in for w in range(W)]
    for w in range(W):
        for j in range(k_in):
            v=rnd.uniform(-4,4)
            if kind==2: v=float(rnd.randrange(4))
            if kind==3: v=1.0+rnd.random()/4096
            f=struct.unpack('<f',struct.pack('<f',v))[0]
            if kind==1:
                u=rnd.randrange(40)
                if u==0: f=float('nan')
                elif u==1: f=float('-inf')
                elif u==2: f=float('inf')
                elif u<8: f=1.5
                elif u==8: f=-0.0
                elif u==9: f=0.0
                if rnd.randrange(16)==0: ids[w][j]=-1
            sc[w][j]=f
        if asc:
            pairs=sorted((ids[w][j],sc[w][j]) for j in range(k_in) if ids[w][j]>=0)
            it=iter(pairs)
            for j in range(k_in):
                if ids[w][j]>=0: ids[w][j],sc[w][j]=next(it)
    out,m,passes,uns,C=run(W,k_in,topk,sc,ids)
    r,k=ref(W,k_in,topk,sc,ids)
    ok = out==r and m==k
    print(f"W{W} k_in {k_in} topk {topk} kind {kind} asc {asc}: C={C} passes={passes} unsorted={uns} m={m} {'ok' if ok else 'MISMATCH'}")
    return ok
allok=True
for args in [(8,2048,2048,0,1,1),(2,2048,2048,0,1,2),(4,2048,2048,1,1,3),(3,700,512,1,1,4),(5,1000,2048,2,1,5),
             (6,1500,700,3,1,6),(7,3,5,1,1,7),(1,100,37,1,1,8),(8,2048,1,0,1,9),(2,2048,2048,0,0,10),(3,700,512,1,0,11),
             (4,1024,2048,2,0,12),(5,1,3,1,1,13),(2,2048,1,2,1,14),(8,16,4,1,1,15)]:
    allok &= case(*args)
print("all equal the reference" if allok else "FAILURES")
raise SystemExit(0 if allok else 1)
