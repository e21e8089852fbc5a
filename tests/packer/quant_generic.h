/* quant_generic.h - forced into a second build of packer/quant.c (see
 * tests/packer/quant.cmake): no AVX2 clone, and every function renamed
 * qnt_generic_*, so test_quant can run both builds side by side. */
#define QNT_NO_CLONES 1
#define qnt_tensor_exponent qnt_generic_tensor_exponent
#define qnt_bits_per_weight qnt_generic_bits_per_weight
#define qnt_i4_value qnt_generic_i4_value
#define qnt_i8_value qnt_generic_i8_value
#define qnt_i4_code_sum qnt_generic_i4_code_sum
#define qnt_i8_code_sum qnt_generic_i8_code_sum
#define qnt_i4_group qnt_generic_i4_group
#define qnt_i8_group qnt_generic_i8_group
#define qnt_tensor_free qnt_generic_tensor_free
#define qnt_quantize_tensor qnt_generic_quantize_tensor
#define qnt_dequantize_tensor qnt_generic_dequantize_tensor
#define qnt_tensor_stats qnt_generic_tensor_stats
#define qnt_tensor_code_sums qnt_generic_tensor_code_sums
#define qnt_i4_row qnt_generic_i4_row
#define qnt_i8_row qnt_generic_i8_row
#define qnt_i6_row qnt_generic_i6_row
#define qnt_i7_row qnt_generic_i7_row
#define qnt_i4k_row qnt_generic_i4k_row
