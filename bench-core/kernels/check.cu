// nccl-check's GPU data kernels: fill the input buffers with values whose reduction is exact in any
// order, and count the output elements whose bits differ from the expected ones (nccl-tests' #wrong).
//
// Built without a CUDA toolkit by clang (see build-ptx.sh) into check.ptx, which the Rust code embeds
// and loads through the driver's JIT, so nccl-check needs neither nvcc at build time nor NVRTC at run
// time. The PTX targets sm_70 / PTX ISA 6.0, which every driver since CUDA 10 can JIT.
//
// Exactness (the same idea as nccl-tests' verifiable.cu, with our own simpler construction): every
// value is a small non-negative integer, so sums, products of {1,2}, maxima and minima are integers
// that the type represents exactly; any reduction order or tree gives the same bits.

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

#define GLOBAL extern "C" __attribute__((global))
#define DEVICE static __attribute__((device)) inline

// Keep these numbers equal to bench-core/src/measure/datatype.rs (DataType::code, RedOp::code).
enum { T_I8 = 0, T_U8 = 1, T_I32 = 2, T_U32 = 3, T_I64 = 4, T_U64 = 5, T_F16 = 6, T_F32 = 7, T_F64 = 8, T_BF16 = 9 };
enum { OP_SUM = 0, OP_PROD = 1, OP_MAX = 2, OP_MIN = 3 };

DEVICE u64 thread_index() {
  return (u64)__nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + __nvvm_read_ptx_sreg_tid_x();
}
DEVICE u64 thread_stride() { return (u64)__nvvm_read_ptx_sreg_nctaid_x() * __nvvm_read_ptx_sreg_ntid_x(); }

DEVICE u32 mix(u32 seed, u32 rank, u64 index) {
  u64 x = index * 0x9E3779B97F4A7C15ull ^ (((u64)seed << 32) | rank);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return (u32)x ^ (u32)(x >> 32);
}

DEVICE u32 type_size(u32 type) {
  switch (type) {
    case T_I8: case T_U8: return 1;
    case T_F16: case T_BF16: return 2;
    case T_I64: case T_U64: case T_F64: return 8;
    default: return 4;
  }
}

// Largest integer up to which every integer is exact in the type (ints wrap, which is exact too).
DEVICE u64 exact_limit(u32 type) {
  switch (type) {
    case T_F16: return 1ull << 11;
    case T_BF16: return 1ull << 8;
    case T_F32: return 1ull << 24;
    case T_F64: return 1ull << 53;
    default: return ~0ull;
  }
}

// Mask for sum inputs: values 0..mask, with mask+1 a power of two, nranks*mask within the limit.
DEVICE u32 sum_mask(u32 type, u32 nranks) {
  u64 per_rank = exact_limit(type) / (nranks ? nranks : 1);
  u32 mask = 63;
  while (mask > 0 && mask > per_rank) mask >>= 1;
  return mask;
}

// Ranks that contribute a factor 2 to products: 2^k must stay exact (f16 max is 65504).
DEVICE u32 prod_ranks(u32 type) { return type == T_F16 ? 15 : 24; }

// The input value of element `index` on `rank`, as an integer.
DEVICE u64 input_value(u32 type, u32 op, u32 seed, u32 rank, u32 nranks, u64 index) {
  u32 h = mix(seed, rank, index);
  switch (op) {
    case OP_SUM: return h & sum_mask(type, nranks);
    case OP_PROD: return rank < prod_ranks(type) ? 1 + (h & 1) : 1;
    default: return h & 63;
  }
}

// Bits of the integer v in the type. v is exact in the type by construction.
DEVICE u64 encode(u32 type, u64 v) {
  switch (type) {
    case T_F32: { float f = (float)v; return (u64)__builtin_bit_cast(u32, f); }
    case T_F64: { double d = (double)v; return __builtin_bit_cast(u64, d); }
    case T_BF16: { float f = (float)v; return (u64)(__builtin_bit_cast(u32, f) >> 16); }
    case T_F16: {
      if (v == 0) return 0;
      float f = (float)v;
      u32 b = __builtin_bit_cast(u32, f);
      u32 e = ((b >> 23) & 0xff) - 127 + 15;
      return (u64)((e << 10) | ((b >> 13) & 0x3ff));
    }
    case T_I8: case T_U8: return v & 0xff;
    case T_I32: case T_U32: return v & 0xffffffffull;
    default: return v;
  }
}

DEVICE void store(void* p, u32 size, u64 i, u64 bits) {
  switch (size) {
    case 1: ((u8*)p)[i] = (u8)bits; break;
    case 2: ((u16*)p)[i] = (u16)bits; break;
    case 4: ((u32*)p)[i] = (u32)bits; break;
    default: ((u64*)p)[i] = bits; break;
  }
}

DEVICE u64 load(const void* p, u32 size, u64 i) {
  switch (size) {
    case 1: return ((const u8*)p)[i];
    case 2: return ((const u16*)p)[i];
    case 4: return ((const u32*)p)[i];
    default: return ((const u64*)p)[i];
  }
}

// Writes rank's input: element i holds input_value(index_base + i).
GLOBAL void nccl_check_fill(void* buf, u64 count, u32 type, u32 op, u32 seed, u32 rank, u32 nranks,
                            u64 index_base) {
  u32 size = type_size(type);
  for (u64 i = thread_index(); i < count; i += thread_stride())
    store(buf, size, i, encode(type, input_value(type, op, seed, rank, nranks, index_base + i)));
}

// Counts elements of buf that differ bitwise from the expected output into *wrong.
//  mode 0 (reduction): expected[i] = op over all ranks r of input_value(r, index_base + i)
//  mode 1 (copy):      expected[i] = input_value(src, index_base + j), where
//                      chunk == 0: src = src_rank, j = i; else src = i / chunk, j = i % chunk.
GLOBAL void nccl_check_verify(const void* buf, u64 count, u32 type, u32 op, u32 seed, u32 nranks,
                              u32 mode, u64 chunk, u32 src_rank, u64 index_base, u64* wrong) {
  u32 size = type_size(type);
  u64 local = 0;
  for (u64 i = thread_index(); i < count; i += thread_stride()) {
    u64 v;
    if (mode == 0) {
      v = input_value(type, op, seed, 0, nranks, index_base + i);
      for (u32 r = 1; r < nranks; r++) {
        u64 x = input_value(type, op, seed, r, nranks, index_base + i);
        switch (op) {
          case OP_SUM: v += x; break;
          case OP_PROD: v *= x; break;
          case OP_MAX: v = x > v ? x : v; break;
          default: v = x < v ? x : v; break;
        }
      }
    } else if (chunk == 0) {
      v = input_value(type, op, seed, src_rank, nranks, index_base + i);
    } else {
      v = input_value(type, op, seed, (u32)(i / chunk), nranks, index_base + i % chunk);
    }
    if (load(buf, size, i) != encode(type, v)) local++;
  }
  if (local) __atomic_fetch_add(wrong, local, __ATOMIC_RELAXED);
}
