# tiny_learned: the committed Qwen3 with learned weights (tests/data/tiny-learned,
# scripts/train_tiny_qwen3.py) packed to q24; the float64 reference's perplexity
# on held-out text is below a bound no context-blind model reaches, and q24's is
# within 1 % of it, also with the 8-bit KV cache, whose KL and top-1 are held
# to their targets (tests/qeval/test_tiny_learned.sh).
add_test(NAME tiny_learned
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_tiny_learned.sh
                 $<TARGET_FILE:qpack> $<TARGET_FILE:qeval> ${CMAKE_SOURCE_DIR}/tests/data/tiny-learned)
set_tests_properties(tiny_learned PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS "qeval;qpack")

# tiny_learned_16k: the same checks on the model with a vocabulary of 16,384
# (tests/data/tiny-learned-16k), whose context-blind bound is its own
# (its README: the unigram model of its training text scores 812 on
# these tokens, the model 123).
add_test(NAME tiny_learned_16k
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_tiny_learned.sh
                 $<TARGET_FILE:qpack> $<TARGET_FILE:qeval> ${CMAKE_SOURCE_DIR}/tests/data/tiny-learned-16k 300)
set_tests_properties(tiny_learned_16k PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS "qeval;qpack")

# vs_llamacpp_16k, vs_llamacpp: qpack's int4 and int8 against llama.cpp's
# Q4_K_M and Q8_0 figures that scripts/compare_llamacpp.sh recorded in each
# model's llamacpp.json, on the same windows (tests/qeval/test_vs_llamacpp.sh).
add_test(NAME vs_llamacpp_16k
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_vs_llamacpp.sh $<TARGET_FILE:qpack> $<TARGET_FILE:qeval>
                 $<TARGET_FILE:qrun> ${CMAKE_SOURCE_DIR}/tests/data/tiny-learned-16k)
add_test(NAME vs_llamacpp
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_vs_llamacpp.sh $<TARGET_FILE:qpack> $<TARGET_FILE:qeval>
                 $<TARGET_FILE:qrun> ${CMAKE_SOURCE_DIR}/tests/data/tiny-learned)
set_tests_properties(vs_llamacpp_16k vs_llamacpp PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS "qeval;qpack")
