//! Data types and reduction operations, with the names nccl-tests prints and NCCL's enum values.

use serde::Serialize;

/// An NCCL data type. `code()` is both NCCL's `ncclDataType_t` and the kernels' type code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DataType {
    Int8,
    Uint8,
    Int32,
    Uint32,
    Int64,
    Uint64,
    Half,
    Float,
    Double,
    Bfloat16,
}

impl DataType {
    pub const ALL: [DataType; 10] = [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Half,
        DataType::Float,
        DataType::Double,
        DataType::Bfloat16,
    ];

    /// NCCL's `ncclDataType_t` value (ncclInt8 = 0 ... ncclBfloat16 = 9).
    pub fn code(self) -> u32 {
        self as u32
    }

    pub fn size(self) -> u64 {
        match self {
            DataType::Int8 | DataType::Uint8 => 1,
            DataType::Half | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Float => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Double => 8,
        }
    }

    /// The name nccl-tests uses for `-d` and prints in the `type` column.
    pub fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Uint8 => "uint8",
            DataType::Int32 => "int32",
            DataType::Uint32 => "uint32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Half => "half",
            DataType::Float => "float",
            DataType::Double => "double",
            DataType::Bfloat16 => "bfloat16",
        }
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.to_ascii_lowercase();
        let alias = match t.as_str() {
            "f32" | "float32" => "float",
            "f64" | "float64" => "double",
            "f16" | "float16" | "fp16" => "half",
            "bf16" => "bfloat16",
            "i8" | "char" => "int8",
            "u8" => "uint8",
            "i32" | "int" => "int32",
            "u32" => "uint32",
            "i64" => "int64",
            "u64" => "uint64",
            other => other,
        };
        DataType::ALL
            .into_iter()
            .find(|d| d.name() == alias)
            .ok_or_else(|| {
                let names: Vec<_> = DataType::ALL.iter().map(|d| d.name()).collect();
                format!(
                    "unknown datatype '{text}' (choose from {})",
                    names.join(", ")
                )
            })
    }
}

/// A reduction operation. `code()` is NCCL's `ncclRedOp_t` value and the kernels' op code.
///
/// `avg` is not offered: its result is not bit-exact (nccl-tests allows 2 ulp), and the point of
/// the check is bit-exact data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RedOp {
    Sum,
    Prod,
    Max,
    Min,
}

impl RedOp {
    pub const ALL: [RedOp; 4] = [RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min];

    pub fn code(self) -> u32 {
        self as u32
    }

    pub fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Max => "max",
            RedOp::Min => "min",
        }
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.to_ascii_lowercase();
        RedOp::ALL
            .into_iter()
            .find(|o| o.name() == t)
            .ok_or_else(|| {
                format!("unknown reduction op '{text}' (choose from sum, prod, max, min)")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_nccl_enums() {
        // nccl.h: ncclInt8=0 ... ncclFloat32=7, ncclFloat64=8, ncclBfloat16=9; ncclSum=0 ... ncclMin=3
        assert_eq!(DataType::Float.code(), 7);
        assert_eq!(DataType::Bfloat16.code(), 9);
        assert_eq!(DataType::Half.code(), 6);
        assert_eq!(RedOp::Min.code(), 3);
    }

    #[test]
    fn names_round_trip_and_aliases_work() {
        for d in DataType::ALL {
            assert_eq!(DataType::parse(d.name()).unwrap(), d);
        }
        assert_eq!(DataType::parse("bf16").unwrap(), DataType::Bfloat16);
        assert!(DataType::parse("float128")
            .unwrap_err()
            .contains("'float128'"));
        assert_eq!(RedOp::parse("MAX").unwrap(), RedOp::Max);
        assert!(RedOp::parse("avg").is_err());
    }
}
