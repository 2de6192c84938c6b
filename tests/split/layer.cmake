# --split-mode layer (core/scheduler + models/layer_placement): over TG_CPU_DEVICES=2,3,4
# virtual CPU devices, tg-run must give -sm none's 64 greedy tokens and top-5 logits within
# 1e-4 (the prompt goes through the pipelined path, every generated token through the
# sequential one). Included by tests/split/CMakeLists.txt (its helpers and models).
#
#   ctest -L split -R layer --output-on-failure

tg_split_compare_all(layer)
tg_split_compare_moe(layer)

# A device with proportion 0 gets no layers: CPU0 idle, CPU1 and CPU2 share the model.
tg_split_compare(split_layer_stories260k_3dev_zero_share stories260k 3 -sm layer -ts 0,1,1)

tg_split_error_test(split_layer_error_ts_count
                    "tg-run: error: --tensor-split has 3 values for 2 devices" -sm layer -ts 3,1,1)
tg_split_error_test(split_layer_error_ts_all_zero
                    "tg-run: error: --tensor-split values are all zero" -sm layer -ts 0,0)
tg_split_error_test(split_layer_error_ts_negative
                    "tg-run: error: --tensor-split: '-1' is not a non-negative number"
                    -sm layer -ts 1,-1)
tg_split_error_test(split_layer_error_unknown_device
                    "tg-run: error: no device named 'CPU7' \\(devices: CPU0, CPU1\\)"
                    -sm layer --device CPU0,CPU7)
