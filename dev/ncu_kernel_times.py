# dev/ncu_kernel_times.py — per-kernel medians of gpu__time_duration from an ncu --csv --page raw log
# (ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw PROGRAM > LOG).
import csv, sys, re, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = None; agg = collections.OrderedDict()
for r in rows:
    if 'Kernel Name' in r: hdr = r; continue
    if not hdr or len(r) != len(hdr): continue
    d = dict(zip(hdr, r))
    short = d['Kernel Name'].split('(')[0].replace('void ', '')
    v = d.get('gpu__time_duration.sum', '0').replace(',', '')
    try: v = float(v)
    except: continue
    agg.setdefault(short, []).append(v)
for k, v in agg.items():
    print('%-48s n=%3d  median %9.1f us  min %9.1f' % (k[:48], len(v), sorted(v)[len(v)//2] / 1000, min(v) / 1000))
