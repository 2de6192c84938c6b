# --split-mode layer (core/scheduler + models/layer_placement): over TG_CPU_DEVICES=2,3,4
# virtual CPU devices, tg-run must give -sm none's 64 greedy tokens and top-5 logits within
# 1e-4 (the prompt goes through the pipelined path, every generated token through the
# sequential one). Included by tests/split/CMakeLists.txt (TG_SPLIT_COMPARE, TG_SPLIT_MODELS).
#
#   ctest -L split -R layer --output-on-failure

set(_tg_layer_ts_2 3,1)
set(_tg_layer_ts_3 3,1,1)
set(_tg_layer_ts_4 3,1,1,1)

# A random-weight f32 model with 6 heads (3 KV heads), 4 layers: head counts that do not
# divide evenly into device counts, and more devices than some splits give layers.
set(_tg_layer_synth ${CMAKE_CURRENT_BINARY_DIR}/synth_llama_96x256x4_6h_f32.gguf)
set(_tg_layer_models stories260k)
set(_tg_layer_model_stories260k ${TG_SPLIT_MODELS}/stories260K.gguf)
if(TARGET tg-gguf)
  add_test(NAME split_layer_synth_6h_model
           COMMAND tg-gguf synth ${_tg_layer_synth} --dims 96,256,4,6,3,300 --type f32)
  set_tests_properties(split_layer_synth_6h_model PROPERTIES LABELS split TIMEOUT 120
                       FIXTURES_SETUP tg_split_layer_synth)
  list(APPEND _tg_layer_models synth6h)
  set(_tg_layer_model_synth6h ${_tg_layer_synth})
endif()

foreach(model ${_tg_layer_models})
  foreach(n 2 3 4)
    foreach(variant even ts)
      set(_args -sm layer)
      if(variant STREQUAL "ts")
        list(APPEND _args -ts ${_tg_layer_ts_${n}})
      endif()
      set(_name split_layer_${model}_${n}dev_${variant})
      add_test(NAME ${_name}
               COMMAND /usr/bin/python3 ${TG_SPLIT_COMPARE} --tg-run $<TARGET_FILE:tg-run>
                       --model ${_tg_layer_model_${model}} --devices ${n} -- ${_args})
      set_tests_properties(${_name} PROPERTIES LABELS split SKIP_RETURN_CODE 77 TIMEOUT 300
                           ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
      if(model STREQUAL "synth6h")
        set_tests_properties(${_name} PROPERTIES FIXTURES_REQUIRED tg_split_layer_synth)
      endif()
    endforeach()
  endforeach()
endforeach()

# A device with proportion 0 gets no layers: CPU0 idle, CPU1 and CPU2 share the model.
add_test(NAME split_layer_stories260k_3dev_zero_share
         COMMAND /usr/bin/python3 ${TG_SPLIT_COMPARE} --tg-run $<TARGET_FILE:tg-run>
                 --model ${TG_SPLIT_MODELS}/stories260K.gguf --devices 3 -- -sm layer -ts 0,1,1)
set_tests_properties(split_layer_stories260k_3dev_zero_share PROPERTIES LABELS split
                     SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)

# Bad device flags: exit status 1 and one line naming the problem. The plan is resolved
# before the model is opened, so these need no model file.
function(tg_layer_error_test name expected)
  add_test(NAME split_layer_error_${name}
           COMMAND /bin/sh -c "\"$0\" -m /nonexistent.gguf -n 1 \"$@\" 2>&1; echo \"exit=<$?>\""
                   $<TARGET_FILE:tg-run> ${ARGN})
  set_tests_properties(split_layer_error_${name} PROPERTIES LABELS split TIMEOUT 60
                       ENVIRONMENT TG_CPU_DEVICES=2
                       PASS_REGULAR_EXPRESSION "${expected}.*exit=<1>")
endfunction()
tg_layer_error_test(ts_count "tg-run: error: --tensor-split has 3 values for 2 devices"
                    -sm layer -ts 3,1,1)
tg_layer_error_test(ts_all_zero "tg-run: error: --tensor-split values are all zero"
                    -sm layer -ts 0,0)
tg_layer_error_test(ts_negative "tg-run: error: --tensor-split: '-1' is not a non-negative number"
                    -sm layer -ts 1,-1)
tg_layer_error_test(unknown_device "tg-run: error: no device named 'CPU7' \\(devices: CPU0, CPU1\\)"
                    -sm layer --device CPU0,CPU7)
