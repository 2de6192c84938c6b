// Quantized MUL_MAT activations, 32 per "unit" (mul_mat_act.comp writes them): words 0..7 the
// int8 quants (little-endian, 4 per word), word 8 the scale (f32), word 9 the sum of the quants.
const uint kActUnitBytes = 40u;

// The 4 signed bytes of a word.
ivec4 unpack_i8x4(uint w) { return ivec4(int(w << 24) >> 24, int(w << 16) >> 24, int(w << 8) >> 24, int(w) >> 24); }
// The 4 unsigned bytes of a word.
uvec4 unpack_u8x4(uint w) { return uvec4(w & 0xFFu, (w >> 8) & 0xFFu, (w >> 16) & 0xFFu, w >> 24); }
