#!/usr/bin/env python3
"""Per-kind figures of scripts/nemesis.py JSON summaries: python3 scripts/nemesis_summary.py FILE..."""
import json,sys,statistics as st
for f in sys.argv[1:]:
    d=json.load(open(f))
    r=d['rounds']
    serv=[x['targets_serving_after_heal_s'] for x in r if x.get('targets_serving_after_heal_s') is not None]
    conv=[x['converge_s'] for x in r if x.get('converge_s') is not None]
    kinds={}
    for x in r:
        kinds.setdefault(x['kind'],[]).append(x)
    print(f, 'passed',d['passed'],'rounds',d['fault_rounds'],'wall',d['wall_seconds'],'anomalies',d['anomalies']['count'],'lost',d['acknowledged_lost']['count'],'healthy removed',d['healthy_members_removed'],'no-copy',d['partitions_ever_without_copy'],'exits',d['node_exits'])
    print(' serving after heal: n=%d median %.3f p90 %.3f max %.3f'%(len(serv),st.median(serv),sorted(serv)[int(.9*len(serv))-1],max(serv)))
    print(' full strength after heal: median %.3f p90 %.3f max %.3f'%(st.median(conv),sorted(conv)[int(.9*len(conv))-1],max(conv)))
    for k,xs in sorted(kinds.items()):
        s=[x['targets_serving_after_heal_s'] for x in xs if x.get('targets_serving_after_heal_s') is not None]
        c=[x['converge_s'] for x in xs]
        print('  %-11s n=%3d serving median %.3f max %.3f | full strength median %.3f max %.3f'%(k,len(xs),st.median(s) if s else -1,max(s) if s else -1,st.median(c),max(c)))
