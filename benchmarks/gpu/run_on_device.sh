#!/usr/bin/env bash
# Run THERE (the offline GPU box), from the repository root:
#   bash benchmarks/gpu/run_on_device.sh STAGE...
# Stages, in the order given:
#   install  pip-install every .gpu/chunkN/ present into $SITE (--target, --no-deps, --no-index);
#            a chunk already installed on this machine is skipped (marker $SITE/.chunkN.done).
#            The machine's own packages are never touched: $SITE goes first on PYTHONPATH.
#   calib    benchmarks/calibrate_gpu.py (torch only) -> $OUT/h200_llama8b_ctx{1024,4096}.csv
#   probe    versions, glibc, nvcc, GPU; imports sglang / sgl_kernel / flashinfer / xgrammar
#   configs  writes a Llama-3.1-8B-shaped target and an EAGLE-3 draft config (dummy weights)
#   sglang   SGLang Engine without EAGLE-3, with the chain (3 steps, topk 1, 4 tokens) and the
#            tree (2 steps, topk 4, 16 tokens): greedy outputs + step costs over bs 1..256,
#            -> $OUT/h200_sglang0517_llama8b.csv, $OUT/sglang_summary.txt, $OUT/sglang_logs.tgz
# Environment: OUT (results; default $WORK/out), SITE (default /tmp/specfsm_site),
# WORK (default /tmp/specfsm_gpu), SPECS (default "none chain tree"), BS (default
# 1,2,4,8,16,32,64,128,256), ENGINE_TIMEOUT (seconds per engine run, default 300: the first
# start on a fresh box JIT-compiles for minutes), ATTN (attention backend: flashinfer (default)
# or triton; fa3 is slimmed out).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
SITE=${SITE:-/tmp/specfsm_site}
WORK=${WORK:-/tmp/specfsm_gpu}
OUT=${OUT:-$WORK/out}
SPECS=${SPECS:-"none chain tree"}
BS=${BS:-1,2,4,8,16,32,64,128,256}
ENGINE_TIMEOUT=${ENGINE_TIMEOUT:-300}
ATTN=${ATTN:-flashinfer}
# flashinfer's default 384 MiB workspace overflows while capturing the verify graphs at bs 256
# ("Buffer overflow when allocating memory for batch_prefill_tmp_v"); 2 GiB ran the tree.
[ "$ATTN" = flashinfer ] && export SGLANG_FLASHINFER_WORKSPACE_SIZE=${SGLANG_FLASHINFER_WORKSPACE_SIZE:-2147483648}
PY=${PY:-python3}
mkdir -p "$SITE" "$WORK/res" "$OUT"
export PYTHONUNBUFFERED=1
T0=$(date +%s)
log() { echo "[run_on_device +$(( $(date +%s) - T0 ))s] $*"; }

stage_install() {
  local c n
  for c in .gpu/chunk*/; do
    [ -d "$c" ] || continue
    n=$(basename "$c")
    if [ -f "$SITE/.$n.done" ]; then log "install: $n already installed"; continue; fi
    log "install: $n ($(ls "$c" | wc -l) wheels, $(du -sm "$c" | cut -f1) MiB)"
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" "$c"*.whl; then
      touch "$SITE/.$n.done"
    else
      log "install: $n FAILED"; return 1
    fi
  done
  log "install: done: $(ls -a "$SITE" | grep -c '^\.chunk') chunk(s) on this machine"
}

have_all_chunks() {
  local n missing=0
  if [ ! -f .gpu/manifest.txt ]; then
    log "no .gpu/manifest.txt carried; assuming chunk1 and chunk2"
    for n in chunk1 chunk2; do [ -f "$SITE/.$n.done" ] || { log "MISSING $n"; missing=1; }; done
  else
    for n in $(cut -d/ -f1 .gpu/manifest.txt | sort -u); do
      [ -f "$SITE/.$n.done" ] || { log "MISSING $n: carry .gpu/$n in a call with 'install'"; missing=1; }
    done
  fi
  return $missing
}

stage_calib() {
  log "calib: start"
  "$PY" benchmarks/calibrate_gpu.py --out-dir "$OUT" \
    --ref specfsm/data/costs/h200_llama8b_shared_ref.csv \
    --markdown "$OUT/calib_compare.md" 2>&1 | tee "$OUT/calib.log"
  log "calib: end"
}

sg_env() { env PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" "$@"; }

stage_probe() {
  log "probe: python $("$PY" -V 2>&1), $(ldd --version | head -1)"
  nvcc --version 2>/dev/null | tail -2
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  "$PY" -m pip list 2>/dev/null | grep -i -E '^(torch|triton|numpy|transformers|tokenizers|huggingface|pydantic|fastapi|ninja|cuda-|nvidia-cutlass|uvloop) ' | tr -s ' ' | paste -sd ';'
  "$PY" -c 'import sys; print("sitecustomize on box:", [p for p in sys.path if __import__("os").path.isfile(p + "/sitecustomize.py")])'
  have_all_chunks || return 1
  sg_env "$PY" - <<'EOF'
import time
t = time.time()
import torch
import sgl_kernel, flashinfer, xgrammar, transformers, tokenizers
import sglang
print(f"probe: imports {time.time() - t:.1f}s: sglang {sglang.__version__} sgl_kernel "
      f"{sgl_kernel.__version__} flashinfer {flashinfer.__version__} xgrammar "
      f"{getattr(xgrammar, '__version__', '?')} transformers {transformers.__version__} tokenizers "
      f"{tokenizers.__version__} torch {torch.__version__}")
print("probe: transformers from", transformers.__file__)
t = time.time()
import sglang.launch_server, sglang.srt.entrypoints.engine  # noqa: F401
import sglang.srt.speculative.eagle_worker_v2  # noqa: F401
print(f"probe: engine modules {time.time() - t:.1f}s")
EOF
}

stage_configs() {
  mkdir -p "$WORK/models/llama8b" "$WORK/models/eagle3_llama8b"
  "$PY" - "$WORK/models" <<'EOF'
import json, sys
root = sys.argv[1]
rope = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192, "rope_type": "llama3"}
base = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0, "rope_scaling": rope, "hidden_act": "silu",
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "bos_token_id": 128000, "eos_token_id": 128001,
        "initializer_range": 0.02, "pretraining_tp": 1, "use_cache": True}
target = dict(base, architectures=["LlamaForCausalLM"], num_hidden_layers=32)
# EAGLE-3 draft for Llama-3.1-8B: one layer whose attention takes [embeds, hidden] (2 x 4096),
# fc over 3 captured target layers, full 128256-token head (no d2t map), own lm_head.
draft = dict(base, architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1,
             draft_vocab_size=128256, target_hidden_size=4096)
for name, cfg in (("llama8b", target), ("eagle3_llama8b", draft)):
    with open(f"{root}/{name}/config.json", "w") as fh:
        json.dump(cfg, fh, indent=1)
    print("configs: wrote", f"{root}/{name}/config.json")
EOF
}

stage_sglang() {
  have_all_chunks || return 1
  local hook="$WORK/hook" spec rc t1 ntriton pid
  mkdir -p "$hook"
  cp benchmarks/gpu/sitecustomize.py "$hook/sitecustomize.py"
  for spec in $SPECS; do
    rm -f "$WORK/res/timing_$spec.jsonl"
    ntriton=$(find ~/.triton/cache -type f 2>/dev/null | wc -l)
    log "sglang: spec=$spec start (triton cache files: $ntriton)"
    t1=$(date +%s)
    # own process group, so that a timed-out engine's scheduler process goes with it
    SPECFSM_TIMING_FILE="$WORK/res/timing_$spec.jsonl" \
    PYTHONPATH="$hook:$SITE${PYTHONPATH:+:$PYTHONPATH}" \
      setsid timeout -k 10 "$ENGINE_TIMEOUT" "$PY" benchmarks/gpu/sglang_engine_bench.py \
        --spec "$spec" --target "$WORK/models/llama8b" --draft "$WORK/models/eagle3_llama8b" \
        --out "$WORK/res" --bs "$BS" --attention-backend "$ATTN" > "$WORK/res/engine_$spec.log" 2>&1 &
    pid=$!
    wait $pid
    rc=$?
    kill -9 -- "-$pid" 2>/dev/null && log "sglang: killed leftover processes of group $pid"
    log "sglang: spec=$spec rc=$rc in $(( $(date +%s) - t1 ))s; triton cache files now $(find ~/.triton/cache -type f 2>/dev/null | wc -l)"
    grep -E '^\[engine\]|Error|error|Traceback|Exception' "$WORK/res/engine_$spec.log" | grep -v -i 'warn' | tail -25
    [ $rc -eq 0 ] || tail -40 "$WORK/res/engine_$spec.log"
  done
  "$PY" benchmarks/gpu/summarize_sglang.py --dir "$WORK/res" --csv "$OUT/h200_sglang0517_llama8b.csv" \
    --header "measured $(date -u '+%Y-%m-%d %H:%M UTC') by benchmarks/gpu/run_on_device.sh (sglang stage)" \
    --header "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" \
    --header "versions: sglang 0.5.17, sglang-kernel 0.4.5 (slimmed: no FA3/sm100/infllm), flashinfer-python 0.6.15.post1, torch $("$PY" -c 'import torch; print(torch.__version__)'), transformers 5.12.1" \
    --header "method: real SGLang Engine, load_format=dummy, attention_backend=$ATTN, sampling_backend=pytorch, CUDA graphs on (bs $BS), overlap off, radix cache off; per batch size N: N requests x 1024 random prompt tokens, 24 new tokens, ignore_eos; each step timed by benchmarks/gpu/sitecustomize.py (cuda synchronize + perf_counter around the call), median over the steps at batch size N" \
    --header "models: llama8b q=1 decode, q=4 chain verify (3 steps topk 1), q=16 tree verify (2 steps topk 4); llama8b_verify_fwd = target forward alone inside verify; eagle3_draft8b = one draft forward (draft() / (steps-1)), q=topk; eagle3_draft_extend8b = draft-extend after verify, q=draft tokens" \
    2>&1 | tee "$OUT/sglang_summary.txt"
  tar czf "$OUT/sglang_logs.tgz" -C "$WORK/res" . 2>/dev/null
  log "sglang: done"
}

for s in "$@"; do
  case "$s" in
    install|calib|probe|configs|sglang) "stage_$s" || log "stage $s FAILED (rc=$?)";;
    *) log "unknown stage $s";;
  esac
done
log "all stages done"
