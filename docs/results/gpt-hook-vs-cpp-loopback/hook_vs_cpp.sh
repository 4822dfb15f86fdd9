#!/bin/bash
# The hook's codec against the C++ path's with the same codec on gpt, 2 ranks on loopback:
# validation loss at every evaluation. Usage: hook_vs_cpp.sh CODEC [STEPS_LIMIT]
cd /work/main
export PYTHONPATH=/work/main/build/python
codec=$1; limit=${2:-1024}
out=/work/bench-out/hook-vs-cpp; mkdir -p $out
w=$out/gpt-seed0.weights
[ -f $w ] || ./build/gradwire train --model gpt --seed 0 --save-initial-weights $w > /dev/null
args="--model gpt --seed 0 --epochs 1 --batch-size 8 --train-limit $limit --test-limit 64 --eval-every 8 --progress none --threads 1"
tag=$(echo $codec | tr ':=,' '___')
./build/gradwire train --workers 2 $args --compressor $codec --metrics $out/cpp-$tag.jsonl > $out/cpp-$tag.log 2>&1
./build/gradwire run -n 2 -- /usr/bin/python3 bench/peers/ddp_peer.py --hook gradwire --gradwire-codec $codec --initial-weights $w $args --metrics $out/hook-$tag.jsonl > $out/hook-$tag.log 2>&1
python3 - $out/cpp-$tag.jsonl $out/hook-$tag.jsonl <<'PY'
import json,sys
a=[json.loads(l) for l in open(sys.argv[1]) if '"eval"' in l]
b=[json.loads(l) for l in open(sys.argv[2]) if '"eval"' in l]
print(' '.join('%d:%.4f/%.4f'%(x['step'],x['val_loss'],y['val_loss']) for x,y in zip(a,b)))
PY
