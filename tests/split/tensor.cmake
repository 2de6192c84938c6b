# --split-mode tensor (meta/: the tensor-parallel meta device, models/llama_tensor_split):
# over TG_CPU_DEVICES=2,3,4 virtual CPU devices, tg-run must give -sm none's 64 greedy tokens
# and top-5 logits within 1e-4, with even splits and with -ts 3,1 / 3,1,1 / 3,1,1,1.
# stories260K has 8 heads over 4 KV heads; the synthetic model 6 heads over 3 KV heads, so
# 4 devices (and -ts 3,1,1,1 on stories260K) leave a device without attention heads.
# Included by tests/split/CMakeLists.txt (its helpers and models).
#
#   ctest -L split -R tensor --output-on-failure

tg_split_compare_all(tensor)
tg_split_compare_moe(tensor)
# --expert-split: whole experts per device (mixtral's 4 experts with -ts 3,1,1: 2 | 1 | 1).
foreach(model ${_tg_split_moe_models})
  tg_split_compare(split_tensor_${model}_2dev_experts ${model} 2 -sm tensor --expert-split)
  tg_split_compare(split_tensor_${model}_3dev_experts_ts ${model} 3 -sm tensor --expert-split
                   -ts 3,1,1)
endforeach()

# Heads in block-aligned pairs (Q8_0, 6 heads of 48): 4 + 2 on two devices, 4 + 2 with
# -ts 3,1, 2 + 2 + 2 on three; attn_output cut with them, no all-gather.
if(TARGET tg-gguf)
  tg_split_compare_each(tensor synth48q8 "2;3")
endif()

# A device with proportion 0 holds nothing at all and only takes part in the all-reduces.
tg_split_compare(split_tensor_stories260k_3dev_zero_share stories260k 3 -sm tensor -ts 0,1,1)
# Prompt processing in several batches (-b 2): multi-token graphs, then single-token ones.
tg_split_compare(split_tensor_stories260k_2dev_small_batches stories260k 2 -sm tensor -b 2)

tg_split_error_test(split_tensor_error_expert_split_layer
                    "tg-run: error: --expert-split needs --split-mode tensor .is layer."
                    -sm layer --expert-split)
tg_split_error_test(split_tensor_error_ts_count
                    "tg-run: error: --tensor-split has 1 values for 2 devices" -sm tensor -ts 1)
tg_split_error_test(split_tensor_error_unknown_device "tg-run: error: no device named 'GPU0'"
                    -sm tensor --device CPU0,GPU0)
