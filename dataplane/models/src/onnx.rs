//! A minimal ONNX `ModelProto` writer: graphs of nodes over named tensors,
//! initializers as raw little-endian data, inputs and outputs with fixed or
//! symbolic dimensions. Field numbers are those of `onnx.proto`.

use crate::pb::Msg;

/// Fixed, not the crate version, so that a version bump does not change the
/// checked-in model bytes.
const PRODUCER_VERSION: &str = "1";

/// ONNX `TensorProto.DataType` codes used here (the same numbers as
/// `sluice_wire::DType`).
pub mod elem {
    /// 32-bit float.
    pub const FLOAT: i32 = 1;
    /// 32-bit signed integer.
    pub const INT32: i32 = 6;
    /// 64-bit signed integer.
    pub const INT64: i32 = 7;
}

/// One dimension of a declared shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    /// A fixed size.
    Fixed(i64),
    /// A symbolic size; equal names bind to the same value at run time.
    Param(String),
    /// A dynamic size with no name (as exporters often leave outputs).
    Unknown,
}

/// A graph input or output declaration.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueInfo {
    /// Name.
    pub name: String,
    /// Element type code, see [`elem`].
    pub elem_type: i32,
    /// Shape.
    pub dims: Vec<Dim>,
}

/// A constant tensor (initializer or attribute value).
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// Name.
    pub name: String,
    /// Element type code.
    pub elem_type: i32,
    /// Shape.
    pub dims: Vec<i64>,
    /// Little-endian element bytes.
    pub raw: Vec<u8>,
}

impl Tensor {
    /// An f32 tensor.
    pub fn f32(name: &str, dims: &[i64], data: &[f32]) -> Tensor {
        debug_assert_eq!(dims.iter().product::<i64>() as usize, data.len());
        Tensor {
            name: name.to_string(),
            elem_type: elem::FLOAT,
            dims: dims.to_vec(),
            raw: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// An i64 tensor (shapes and axes).
    pub fn i64(name: &str, dims: &[i64], data: &[i64]) -> Tensor {
        debug_assert_eq!(dims.iter().product::<i64>() as usize, data.len());
        Tensor {
            name: name.to_string(),
            elem_type: elem::INT64,
            dims: dims.to_vec(),
            raw: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    fn encode(&self) -> Msg {
        // TensorProto: dims=1, data_type=2, name=8, raw_data=9.
        let mut m = Msg::new();
        for &d in &self.dims {
            m.int(1, d);
        }
        m.int(2, self.elem_type as i64);
        m.string(8, &self.name);
        m.bytes(9, &self.raw);
        m
    }
}

/// A node attribute.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    /// `INT`.
    Int(i64),
    /// `FLOAT`.
    Float(f32),
    /// `INTS`.
    Ints(Vec<i64>),
}

/// A graph node.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Operator, in the default domain.
    pub op_type: String,
    /// Node name.
    pub name: String,
    /// Input names.
    pub inputs: Vec<String>,
    /// Output names.
    pub outputs: Vec<String>,
    /// Attributes, in the order given.
    pub attrs: Vec<(String, Attr)>,
}

impl Node {
    /// A node without attributes.
    pub fn new(op_type: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> Node {
        Node {
            op_type: op_type.to_string(),
            name: name.to_string(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
            attrs: Vec::new(),
        }
    }

    /// Adds an attribute.
    pub fn attr(mut self, name: &str, value: Attr) -> Node {
        self.attrs.push((name.to_string(), value));
        self
    }

    fn encode(&self) -> Msg {
        // NodeProto: input=1, output=2, name=3, op_type=4, attribute=5.
        let mut m = Msg::new();
        for i in &self.inputs {
            m.string(1, i);
        }
        for o in &self.outputs {
            m.string(2, o);
        }
        m.string(3, &self.name);
        m.string(4, &self.op_type);
        for (name, value) in &self.attrs {
            // AttributeProto: name=1, f=2, i=3, ints=8, type=20.
            let mut a = Msg::new();
            a.string(1, name);
            let ty = match value {
                Attr::Float(f) => {
                    a.float(2, *f);
                    1
                }
                Attr::Int(i) => {
                    a.int(3, *i);
                    2
                }
                Attr::Ints(v) => {
                    for &i in v {
                        a.int(8, i);
                    }
                    7
                }
            };
            a.int(20, ty);
            m.msg(5, &a);
        }
        m
    }
}

impl ValueInfo {
    /// A tensor declaration.
    pub fn new(name: &str, elem_type: i32, dims: Vec<Dim>) -> ValueInfo {
        ValueInfo {
            name: name.to_string(),
            elem_type,
            dims,
        }
    }

    fn encode(&self) -> Msg {
        // ValueInfoProto{name=1, type=2}; TypeProto{tensor_type=1};
        // TypeProto.Tensor{elem_type=1, shape=2}; TensorShapeProto{dim=1};
        // Dimension{dim_value=1 | dim_param=2}.
        let mut shape = Msg::new();
        for d in &self.dims {
            let mut dim = Msg::new();
            match d {
                Dim::Fixed(v) => dim.int(1, *v),
                Dim::Param(p) => dim.string(2, p),
                Dim::Unknown => &mut dim,
            };
            shape.msg(1, &dim);
        }
        let mut tensor = Msg::new();
        tensor.int(1, self.elem_type as i64).msg(2, &shape);
        let mut ty = Msg::new();
        ty.msg(1, &tensor);
        let mut m = Msg::new();
        m.string(1, &self.name).msg(2, &ty);
        m
    }
}

/// A graph.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Graph {
    /// Name.
    pub name: String,
    /// Nodes in topological order.
    pub nodes: Vec<Node>,
    /// Constant tensors. An initializer also listed in `inputs` is an
    /// overridable input (how LoRA parameters are supplied).
    pub initializers: Vec<Tensor>,
    /// Inputs.
    pub inputs: Vec<ValueInfo>,
    /// Outputs.
    pub outputs: Vec<ValueInfo>,
}

/// A model: one graph and its operator set.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// ONNX IR version.
    pub ir_version: i64,
    /// Default-domain opset version.
    pub opset: i64,
    /// Producer name.
    pub producer: String,
    /// Human-readable description.
    pub doc: String,
    /// The graph.
    pub graph: Graph,
}

impl Model {
    /// Serializes the model to ONNX protobuf bytes.
    pub fn encode(&self) -> Vec<u8> {
        // GraphProto: node=1, name=2, initializer=5, input=11, output=12.
        let g = &self.graph;
        let mut graph = Msg::new();
        for n in &g.nodes {
            graph.msg(1, &n.encode());
        }
        graph.string(2, &g.name);
        for t in &g.initializers {
            graph.msg(5, &t.encode());
        }
        for v in &g.inputs {
            graph.msg(11, &v.encode());
        }
        for v in &g.outputs {
            graph.msg(12, &v.encode());
        }
        // ModelProto: ir_version=1, producer_name=2, producer_version=3,
        // doc_string=6, graph=7, opset_import=8 {domain=1, version=2}.
        let mut opset = Msg::new();
        opset.string(1, "").int(2, self.opset);
        let mut m = Msg::new();
        m.int(1, self.ir_version)
            .string(2, &self.producer)
            .string(3, PRODUCER_VERSION)
            .string(6, &self.doc)
            .msg(7, &graph)
            .msg(8, &opset);
        m.into_bytes()
    }
}
