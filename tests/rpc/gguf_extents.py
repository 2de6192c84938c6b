"""The tensor extents of a GGUF file, read here with nothing from tensorgrid: the tests use
them to predict which bytes of a changed file a server must not serve, and how many bytes a
client must then send (a changed byte costs its piece: at most PIECE_BYTES of one tensor).
"""
import struct

PIECE_BYTES = 16 << 20  # proto/model_identity.h kPieceBytes.
# GGUF type id: (elements per block, bytes per block).
_BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 8: (32, 34), 12: (256, 144), 14: (256, 210),
           26: (1, 4), 30: (1, 2)}
_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _skip_value(b, pos, vtype):
    if vtype == 8:  # string
        n, = struct.unpack_from("<Q", b, pos)
        return pos + 8 + n
    if vtype == 9:  # array
        etype, count = struct.unpack_from("<IQ", b, pos)
        pos += 12
        if etype in _SCALARS:
            return pos + count * _SCALARS[etype]
        for _ in range(count):
            pos = _skip_value(b, pos, etype)
        return pos
    return pos + _SCALARS[vtype]


def tensor_extents(path):
    """(data_start, [(name, file_offset, size), ...]) in file order."""
    b = open(path, "rb").read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<IIQQ", b, 0)
    assert magic == 0x46554747 and version in (2, 3), path
    pos, alignment = 24, 32
    for _ in range(n_kv):
        n, = struct.unpack_from("<Q", b, pos)
        key = b[pos + 8:pos + 8 + n].decode()
        vtype, = struct.unpack_from("<I", b, pos + 8 + n)
        pos += 8 + n + 4
        if key == "general.alignment":
            alignment, = struct.unpack_from("<I", b, pos)
        pos = _skip_value(b, pos, vtype)
    infos = []
    for _ in range(n_tensors):
        n, = struct.unpack_from("<Q", b, pos)
        name = b[pos + 8:pos + 8 + n].decode()
        pos += 8 + n
        n_dims, = struct.unpack_from("<I", b, pos)
        ne = struct.unpack_from(f"<{n_dims}Q", b, pos + 4)
        ttype, offset = struct.unpack_from("<IQ", b, pos + 4 + 8 * n_dims)
        pos += 4 + 8 * n_dims + 12
        elems, size = _BLOCKS[ttype]
        count = 1
        for d in ne:
            count *= d
        infos.append((name, offset, count // elems * size))
    data_start = (pos + alignment - 1) // alignment * alignment
    return data_start, [(name, data_start + off, size) for name, off, size in infos]


def piece_of(extents, file_offset):
    """(offset, size) of the piece holding byte `file_offset`."""
    for _, off, size in extents:
        if off <= file_offset < off + size:
            start = off + (file_offset - off) // PIECE_BYTES * PIECE_BYTES
            return start, min(PIECE_BYTES, off + size - start)
    raise ValueError(f"byte {file_offset} is in no tensor")
