# --split-mode tensor (meta/: the tensor-parallel meta device, models/llama_tensor_split):
# over TG_CPU_DEVICES=2,3,4 virtual CPU devices, tg-run must give -sm none's 64 greedy tokens
# and top-5 logits within 1e-4, with even splits and with -ts 3,1 / 3,1,1 / 3,1,1,1.
# stories260K has 8 heads over 4 KV heads; the synthetic model 6 heads over 3 KV heads, so
# 4 devices (and -ts 3,1,1,1 on stories260K) leave a device without attention heads.
# Included by tests/split/CMakeLists.txt (TG_SPLIT_COMPARE, TG_SPLIT_MODELS).
#
#   ctest -L split -R tensor --output-on-failure

set(_tg_tensor_ts_2 3,1)
set(_tg_tensor_ts_3 3,1,1)
set(_tg_tensor_ts_4 3,1,1,1)

set(_tg_tensor_synth ${CMAKE_CURRENT_BINARY_DIR}/synth_tensor_96x256x4_6h_f32.gguf)
set(_tg_tensor_models stories260k)
set(_tg_tensor_model_stories260k ${TG_SPLIT_MODELS}/stories260K.gguf)
if(TARGET tg-gguf)
  add_test(NAME split_tensor_synth_6h_model
           COMMAND tg-gguf synth ${_tg_tensor_synth} --dims 96,256,4,6,3,300 --type f32)
  set_tests_properties(split_tensor_synth_6h_model PROPERTIES LABELS split TIMEOUT 120
                       FIXTURES_SETUP tg_split_tensor_synth)
  list(APPEND _tg_tensor_models synth6h)
  set(_tg_tensor_model_synth6h ${_tg_tensor_synth})
endif()

function(tg_tensor_compare name model n)
  add_test(NAME ${name}
           COMMAND /usr/bin/python3 ${TG_SPLIT_COMPARE} --tg-run $<TARGET_FILE:tg-run>
                   --model ${_tg_tensor_model_${model}} --devices ${n} -- -sm tensor ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS split SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
  if(model STREQUAL "synth6h")
    set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED tg_split_tensor_synth)
  endif()
endfunction()

foreach(model ${_tg_tensor_models})
  foreach(n 2 3 4)
    tg_tensor_compare(split_tensor_${model}_${n}dev_even ${model} ${n})
    tg_tensor_compare(split_tensor_${model}_${n}dev_ts ${model} ${n} -ts ${_tg_tensor_ts_${n}})
  endforeach()
endforeach()

# A device with proportion 0 holds nothing at all and only takes part in the all-reduces.
tg_tensor_compare(split_tensor_stories260k_3dev_zero_share stories260k 3 -ts 0,1,1)
# Prompt processing in several batches (-b 2): multi-token graphs, then single-token ones.
tg_tensor_compare(split_tensor_stories260k_2dev_small_batches stories260k 2 -b 2)

# Bad device flags for -sm tensor: exit status 1 and one line naming the problem.
function(tg_tensor_error_test name expected)
  add_test(NAME split_tensor_error_${name}
           COMMAND /bin/sh -c "\"$0\" -m /nonexistent.gguf -n 1 \"$@\" 2>&1; echo \"exit=<$?>\""
                   $<TARGET_FILE:tg-run> ${ARGN})
  set_tests_properties(split_tensor_error_${name} PROPERTIES LABELS split TIMEOUT 60
                       ENVIRONMENT TG_CPU_DEVICES=2
                       PASS_REGULAR_EXPRESSION "${expected}.*exit=<1>")
endfunction()
tg_tensor_error_test(ts_count "tg-run: error: --tensor-split has 1 values for 2 devices"
                     -sm tensor -ts 1)
tg_tensor_error_test(unknown_device "tg-run: error: no device named 'GPU0'"
                     -sm tensor --device CPU0,GPU0)
