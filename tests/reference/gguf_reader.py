"""Minimal, dependency-light GGUF (v2/v3) reader with numpy dequantization.

Independent of tensorgrid's C++ loader: it exists so the PyTorch reference
(llama_torch.py) can read the same model files.  Only the standard library and
numpy are used.

    r = GGUFReader("model.gguf")
    r.metadata["general.architecture"]        # -> "llama"
    t = r.tensors["blk.0.attn_q.weight"]       # TensorInfo (name, ne, ggml type, ...)
    w = r.load("blk.0.attn_q.weight")          # float32 ndarray, shape = reversed(ne)

GGUF lists dimensions innermost-first (ne[0] is the contiguous one), so a
tensor with ne=[n_embd, n_vocab] becomes a numpy array of shape
(n_vocab, n_embd).

Run as a script to dump a file's metadata and tensor table:
    /usr/bin/python3 gguf_reader.py MODEL.gguf
"""

from __future__ import annotations

import mmap
import struct
import sys
from dataclasses import dataclass
from typing import Any, Dict, List

import numpy as np

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# --- metadata value types ----------------------------------------------------
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, \
    T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = range(13)

_SCALAR_FMT = {
    T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h",
    T_UINT32: "<I", T_INT32: "<i", T_FLOAT32: "<f", T_BOOL: "<?",
    T_UINT64: "<Q", T_INT64: "<q", T_FLOAT64: "<d",
}
_SCALAR_NP = {
    T_UINT8: "<u1", T_INT8: "<i1", T_UINT16: "<u2", T_INT16: "<i2",
    T_UINT32: "<u4", T_INT32: "<i4", T_FLOAT32: "<f4", T_BOOL: "<u1",
    T_UINT64: "<u8", T_INT64: "<i8", T_FLOAT64: "<f8",
}

# --- ggml tensor types: id -> (name, block size in elements, block bytes) ------
QK_K = 256
GGML_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 2 + 16),
    3: ("Q4_1", 32, 2 + 2 + 16),
    6: ("Q5_0", 32, 2 + 4 + 16),
    7: ("Q5_1", 32, 2 + 2 + 4 + 16),
    8: ("Q8_0", 32, 2 + 32),
    10: ("Q2_K", QK_K, QK_K // 16 + QK_K // 4 + 2 + 2),
    11: ("Q3_K", QK_K, QK_K // 8 + QK_K // 4 + 12 + 2),
    12: ("Q4_K", QK_K, 2 + 2 + 12 + QK_K // 2),
    13: ("Q5_K", QK_K, 2 + 2 + 12 + QK_K // 8 + QK_K // 2),
    14: ("Q6_K", QK_K, QK_K // 2 + QK_K // 4 + QK_K // 16 + 2),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    30: ("BF16", 1, 2),
}
GGML_TYPE_BY_NAME = {v[0]: k for k, v in GGML_TYPES.items()}


class GGUFError(Exception):
    pass


@dataclass
class TensorInfo:
    name: str
    ne: List[int]          # innermost-first, as stored in the file
    ggml_type: int
    offset: int            # relative to the data section
    abs_offset: int = 0    # absolute file offset
    n_bytes: int = 0

    @property
    def type_name(self) -> str:
        return GGML_TYPES.get(self.ggml_type, ("type%d" % self.ggml_type,))[0]

    @property
    def shape(self) -> tuple:
        """numpy shape (outermost-first)."""
        return tuple(reversed(self.ne)) if self.ne else (1,)

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.ne:
            n *= d
        return n


class GGUFReader:
    def __init__(self, path: str):
        self.path = path
        self._f = open(path, "rb")
        try:
            self._mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError as e:  # empty file
            raise GGUFError("%s: cannot map file (%s)" % (path, e))
        self._pos = 0
        self.metadata: Dict[str, Any] = {}
        self.metadata_types: Dict[str, int] = {}
        self.tensors: Dict[str, TensorInfo] = {}
        self.tensor_order: List[str] = []
        self._parse()

    # -- low-level readers --
    def _read(self, fmt: str):
        size = struct.calcsize(fmt)
        if self._pos + size > len(self._mm):
            raise GGUFError("truncated file at offset %d" % self._pos)
        v = struct.unpack_from(fmt, self._mm, self._pos)[0]
        self._pos += size
        return v

    def _read_str(self) -> str:
        n = self._read("<Q")
        if self._pos + n > len(self._mm):
            raise GGUFError("string of length %d overruns file at %d" % (n, self._pos))
        b = self._mm[self._pos:self._pos + n]
        self._pos += n
        return b.decode("utf-8", errors="replace")

    def _read_value(self, vtype: int):
        if vtype in _SCALAR_FMT:
            return self._read(_SCALAR_FMT[vtype])
        if vtype == T_STRING:
            return self._read_str()
        if vtype == T_ARRAY:
            etype = self._read("<I")
            count = self._read("<Q")
            if etype in _SCALAR_NP:  # fast path: numeric arrays
                dt = np.dtype(_SCALAR_NP[etype])
                nbytes = dt.itemsize * count
                if self._pos + nbytes > len(self._mm):
                    raise GGUFError("array overruns file at %d" % self._pos)
                arr = np.frombuffer(self._mm, dtype=dt, count=count, offset=self._pos).copy()
                self._pos += nbytes
                if etype == T_BOOL:
                    arr = arr.astype(bool)
                return arr.tolist()
            # strings and nested arrays
            return [self._read_value(etype) for _ in range(count)]
        raise GGUFError("unknown metadata value type %d at offset %d" % (vtype, self._pos))

    def _parse(self):
        magic = self._mm[0:4]
        if magic != GGUF_MAGIC:
            raise GGUFError("%s: not a GGUF file (magic %r)" % (self.path, magic))
        self._pos = 4
        self.version = self._read("<I")
        if self.version not in (2, 3):
            raise GGUFError("unsupported GGUF version %d (need 2 or 3)" % self.version)
        n_tensors = self._read("<Q")
        n_kv = self._read("<Q")
        for _ in range(n_kv):
            key = self._read_str()
            vtype = self._read("<I")
            self.metadata[key] = self._read_value(vtype)
            self.metadata_types[key] = vtype
        for _ in range(n_tensors):
            name = self._read_str()
            n_dims = self._read("<I")
            if n_dims > 8:
                raise GGUFError("tensor %s: implausible n_dims %d" % (name, n_dims))
            ne = [self._read("<Q") for _ in range(n_dims)]
            gtype = self._read("<I")
            offset = self._read("<Q")
            if name in self.tensors:
                raise GGUFError("duplicate tensor name %s" % name)
            self.tensors[name] = TensorInfo(name, ne, gtype, offset)
            self.tensor_order.append(name)
        self.alignment = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        if self.alignment <= 0 or (self.alignment & (self.alignment - 1)):
            raise GGUFError("general.alignment %d is not a power of two" % self.alignment)
        pad = (-self._pos) % self.alignment
        self.data_offset = self._pos + pad
        for t in self.tensors.values():
            if t.ggml_type in GGML_TYPES:
                _, bs, bb = GGML_TYPES[t.ggml_type]
                if t.ne and t.ne[0] % bs:
                    raise GGUFError("tensor %s: ne[0]=%d not a multiple of block %d"
                                    % (t.name, t.ne[0], bs))
                t.n_bytes = t.n_elements // bs * bb
            t.abs_offset = self.data_offset + t.offset
            if t.offset % self.alignment:
                raise GGUFError("tensor %s: offset %d not aligned to %d"
                                % (t.name, t.offset, self.alignment))
            if t.abs_offset + t.n_bytes > len(self._mm):
                raise GGUFError("tensor %s: data [%d, %d) beyond end of file (%d bytes)"
                                % (t.name, t.abs_offset, t.abs_offset + t.n_bytes, len(self._mm)))

    # -- public API --
    def get(self, key: str, default=None):
        return self.metadata.get(key, default)

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as a read-only uint8 array (no copy)."""
        t = self.tensors[name]
        if t.ggml_type not in GGML_TYPES:
            raise GGUFError("tensor %s: unsupported ggml type %d" % (name, t.ggml_type))
        return np.frombuffer(self._mm, dtype=np.uint8, count=t.n_bytes, offset=t.abs_offset)

    def load(self, name: str) -> np.ndarray:
        """Dequantized float32 copy of the tensor, numpy shape = reversed(ne)."""
        t = self.tensors[name]
        flat = dequantize(self.raw(name), t.ggml_type, t.n_elements)
        return flat.reshape(t.shape)

    def close(self):
        try:
            self._mm.close()
        except BufferError:
            pass  # numpy views still alive; the map closes with them
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


# --- dequantization ------------------------------------------------------------

def _f16(a: np.ndarray) -> np.ndarray:
    """uint8 array (..., 2) -> float32 (...)."""
    return np.ascontiguousarray(a).view("<f2")[..., 0].astype(np.float32)


def _blocks(raw: np.ndarray, block_bytes: int) -> np.ndarray:
    if raw.size % block_bytes:
        raise GGUFError("data size %d not a multiple of block size %d" % (raw.size, block_bytes))
    return raw.reshape(-1, block_bytes)


def _nibbles_32(qs: np.ndarray) -> np.ndarray:
    """qs (nb, 16) -> (nb, 32): low nibbles are elements 0..15, high 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _qh_bits_32(qh: np.ndarray) -> np.ndarray:
    """qh (nb, 4) little-endian uint32 -> (nb, 32) bit j of element j (0/1)."""
    bits = np.unpackbits(qh, axis=1, bitorder="little")  # (nb, 32): bit j of the u32
    return bits


def deq_q4_0(raw):
    b = _blocks(raw, 18)
    d = _f16(b[:, 0:2])[:, None]
    q = _nibbles_32(b[:, 2:18]).astype(np.int8) - np.int8(8)
    return (q.astype(np.float32) * d).reshape(-1)


def deq_q4_1(raw):
    b = _blocks(raw, 20)
    d = _f16(b[:, 0:2])[:, None]
    m = _f16(b[:, 2:4])[:, None]
    q = _nibbles_32(b[:, 4:20]).astype(np.float32)
    return (q * d + m).reshape(-1)


def deq_q5_0(raw):
    b = _blocks(raw, 22)
    d = _f16(b[:, 0:2])[:, None]
    hb = _qh_bits_32(b[:, 2:6])
    q = (_nibbles_32(b[:, 6:22]) | (hb << 4)).astype(np.int8) - np.int8(16)
    return (q.astype(np.float32) * d).reshape(-1)


def deq_q5_1(raw):
    b = _blocks(raw, 24)
    d = _f16(b[:, 0:2])[:, None]
    m = _f16(b[:, 2:4])[:, None]
    hb = _qh_bits_32(b[:, 4:8])
    q = (_nibbles_32(b[:, 8:24]) | (hb << 4)).astype(np.float32)
    return (q * d + m).reshape(-1)


def deq_q8_0(raw):
    b = _blocks(raw, 34)
    d = _f16(b[:, 0:2])[:, None]
    q = b[:, 2:34].view(np.int8).astype(np.float32)
    return (q * d).reshape(-1)


def _k_scale_min(sc12: np.ndarray):
    """Q4_K/Q5_K 12-byte packed 6-bit scales/mins -> (nb, 8) scales, (nb, 8) mins.

    ggml get_scale_min_k4(j): j < 4: sc = q[j] & 63, m = q[j+4] & 63
                               j >= 4: sc = (q[j+4] & 0xF) | ((q[j-4] >> 6) << 4)
                                       m  = (q[j+4] >> 4)  | ((q[j]   >> 6) << 4)
    """
    q = sc12.astype(np.uint8)
    sc = np.empty((q.shape[0], 8), dtype=np.uint8)
    mn = np.empty((q.shape[0], 8), dtype=np.uint8)
    sc[:, 0:4] = q[:, 0:4] & 63
    mn[:, 0:4] = q[:, 4:8] & 63
    sc[:, 4:8] = (q[:, 8:12] & 0x0F) | ((q[:, 0:4] >> 6) << 4)
    mn[:, 4:8] = (q[:, 8:12] >> 4) | ((q[:, 4:8] >> 6) << 4)
    return sc.astype(np.float32), mn.astype(np.float32)


def deq_q2_k(raw):
    # block_q2_K: scales[16] (low 4 bits scale, high 4 bits min), qs[64], d, dmin
    b = _blocks(raw, 84)
    nb = b.shape[0]
    scales = b[:, 0:16]
    qs = b[:, 16:80].reshape(nb, 2, 32)           # two 128-element halves
    d = _f16(b[:, 80:82])[:, None]
    dmin = _f16(b[:, 82:84])[:, None]
    dl = d * (scales & 0x0F).astype(np.float32)   # (nb, 16)
    ml = dmin * (scales >> 4).astype(np.float32)
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8)
    # element order: half n (2), shift j (4), sub-group (2 x 16 bytes), l (16)
    q = (qs[:, :, None, :] >> shifts[None, None, :, None]) & 3   # (nb, 2, 4, 32)
    q = q.reshape(nb, 16, 16).astype(np.float32)                  # 16 groups of 16
    return (dl[:, :, None] * q - ml[:, :, None]).reshape(-1)


def deq_q3_k(raw):
    # block_q3_K: hmask[32], qs[64], scales[12], d
    b = _blocks(raw, 110)
    nb = b.shape[0]
    hmask = b[:, 0:32]
    qs = b[:, 32:96].reshape(nb, 2, 32)
    s = b[:, 96:108]
    d = _f16(b[:, 108:110])[:, None]
    k = np.arange(16)
    low = np.where(k < 8, s[:, k % 8] & 0x0F, s[:, k % 8] >> 4)
    high = (s[:, 8 + k % 4] >> (2 * (k // 4)).astype(np.uint8)) & 3
    sc = (low | (high << 4)).astype(np.int16) - 32                   # (nb, 16)
    dl = d * sc.astype(np.float32)
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8)
    q = (qs[:, :, None, :] >> shifts[None, None, :, None]) & 3       # (nb, 2, 4, 32)
    # high bit m = 1 << (4*n + j) of hmask[l] (l over the 32 bytes of a (n, j) group)
    bitidx = (np.arange(2)[:, None] * 4 + np.arange(4)[None, :]).astype(np.uint8)  # (2, 4)
    hbit = (hmask[:, None, None, :] >> bitidx[None, :, :, None]) & 1  # (nb, 2, 4, 32)
    qv = q.astype(np.int8) - np.where(hbit == 1, 0, 4).astype(np.int8)
    qv = qv.reshape(nb, 16, 16).astype(np.float32)
    return (dl[:, :, None] * qv).reshape(-1)


def _deq_q45_k(raw, high_bits):
    # block_q4_K: d, dmin, scales[12], qs[128]; block_q5_K has qh[32] between scales and qs.
    qh_bytes = 32 if high_bits else 0
    b = _blocks(raw, 144 + qh_bytes)
    nb = b.shape[0]
    d = _f16(b[:, 0:2])[:, None]
    dmin = _f16(b[:, 2:4])[:, None]
    sc, mn = _k_scale_min(b[:, 4:16])
    qs = b[:, 16 + qh_bytes:].reshape(nb, 4, 32)            # 4 chunks of 64 elements
    q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(nb, 8, 32)  # low nibbles first
    if high_bits:
        # sub-block s (0..7) takes its high bit from bit s of qh[l]
        qh = b[:, 16:48]                                     # (nb, 32)
        hb = (qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1
        q = q + (hb << 4)
    q = q.astype(np.float32)
    d1 = d * sc                                              # (nb, 8)
    m1 = dmin * mn
    return (d1[:, :, None] * q - m1[:, :, None]).reshape(-1)


def deq_q4_k(raw):
    return _deq_q45_k(raw, high_bits=False)


def deq_q5_k(raw):
    return _deq_q45_k(raw, high_bits=True)


def deq_q6_k(raw):
    # block_q6_K: ql[128], qh[64], scales[16] (int8), d
    b = _blocks(raw, 210)
    nb = b.shape[0]
    ql = b[:, 0:128].reshape(nb, 2, 64)          # per 128-element half: 64 bytes
    qh = b[:, 128:192].reshape(nb, 2, 32)        # per half: 32 bytes
    sc = b[:, 192:208].view(np.int8).astype(np.float32).reshape(nb, 2, 8)
    d = _f16(b[:, 208:210])[:, None, None]
    ql_lo = ql[:, :, 0:32]
    ql_hi = ql[:, :, 32:64]
    q1 = (ql_lo & 0x0F) | (((qh >> 0) & 3) << 4)
    q2 = (ql_hi & 0x0F) | (((qh >> 2) & 3) << 4)
    q3 = (ql_lo >> 4) | (((qh >> 4) & 3) << 4)
    q4 = (ql_hi >> 4) | (((qh >> 6) & 3) << 4)
    q = np.stack([q1, q2, q3, q4], axis=2).astype(np.int8) - np.int8(32)  # (nb, 2, 4, 32)
    q = q.astype(np.float32).reshape(nb, 2, 4, 2, 16)                    # 16-element groups
    # group (n, k, g) (k: which of q1..q4, g: l // 16) uses scale sc[n, 2k + g]
    scale = sc.reshape(nb, 2, 4, 2)
    y = (d[:, :, :, None, None] * scale[..., None]) * q
    return y.reshape(-1)


def dequantize(raw: np.ndarray, ggml_type: int, n_elements: int) -> np.ndarray:
    if ggml_type == 0:
        out = raw.view("<f4").astype(np.float32)
    elif ggml_type == 1:
        out = raw.view("<f2").astype(np.float32)
    elif ggml_type == 30:  # BF16
        out = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    elif ggml_type == 28:
        out = raw.view("<f8").astype(np.float32)
    elif ggml_type in (24, 25, 26, 27):
        out = raw.view({24: "<i1", 25: "<i2", 26: "<i4", 27: "<i8"}[ggml_type]).astype(np.float32)
    else:
        fn = {2: deq_q4_0, 3: deq_q4_1, 6: deq_q5_0, 7: deq_q5_1, 8: deq_q8_0,
              10: deq_q2_k, 11: deq_q3_k, 12: deq_q4_k, 13: deq_q5_k, 14: deq_q6_k}.get(ggml_type)
        if fn is None:
            raise GGUFError("dequantization of ggml type %d (%s) not supported"
                            % (ggml_type, GGML_TYPES.get(ggml_type, ("?",))[0]))
        out = fn(np.asarray(raw, dtype=np.uint8))
    if out.size != n_elements:
        raise GGUFError("dequantized %d elements, expected %d" % (out.size, n_elements))
    return np.ascontiguousarray(out, dtype=np.float32)


def _short(v, limit=8):
    if isinstance(v, list):
        head = ", ".join(repr(x) for x in v[:limit])
        return "[%s%s] (%d)" % (head, ", ..." if len(v) > limit else "", len(v))
    return repr(v)


def main(argv):
    if len(argv) != 2:
        print("usage: gguf_reader.py MODEL.gguf", file=sys.stderr)
        return 2
    with GGUFReader(argv[1]) as r:
        print("GGUF v%d, %d kv, %d tensors, alignment %d, data at %d"
              % (r.version, len(r.metadata), len(r.tensors), r.alignment, r.data_offset))
        for k, v in r.metadata.items():
            print("  %-45s %s" % (k, _short(v)))
        for n in r.tensor_order:
            t = r.tensors[n]
            print("  %-32s %-5s ne=%s" % (n, t.type_name, t.ne))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
