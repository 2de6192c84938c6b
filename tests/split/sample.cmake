# Sampling on the device (SAMPLE, models/llama_graph): over TG_CPU_DEVICES=2 virtual CPU
# devices, tg-run --temp 0.8 --seed 7 -n 64 (and the same with a repetition penalty) must draw
# -sm none's tokens with -sm layer (the scheduler, the draw and its penalty window on the
# output device) and -sm tensor (the meta device: SAMPLE on every device after the logits'
# all-gather, the window mirrored). Included by tests/split/CMakeLists.txt.
#
#   ctest -L split -R sample --output-on-failure

set(_tg_sample_model ${TG_DEMO_MODEL})
set(_tg_sample_plain "--temp 0.8 --seed 7")
set(_tg_sample_penalty "--temp 1.1 --seed 11 --top-k 0 --top-p 0.9 --repeat-penalty 1.3 --repeat-last-n 16")
foreach(mode layer tensor)
  foreach(variant plain penalty)
    set(_name split_sample_${mode}_stories260k_2dev_${variant})
    add_test(NAME ${_name}
             COMMAND /usr/bin/python3 ${TG_SPLIT_COMPARE} --tg-run $<TARGET_FILE:tg-run>
                     --model ${_tg_sample_model} --devices 2 --sample ${_tg_sample_${variant}}
                     -- -sm ${mode})
    set_tests_properties(${_name} PROPERTIES LABELS split SKIP_RETURN_CODE 77 TIMEOUT 300
                         ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
  endforeach()
endforeach()
