// Quantized MUL_MAT activations, 32 per "unit" (mul_mat_act.comp writes them): words 0..7 the
// int8 quants (little-endian, 4 per word), word 8 the scale (f32), word 9 the sum of the quants.
const uint kActUnitBytes = 40u;
