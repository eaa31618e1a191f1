//! Abstract syntax of an XDR specification (only the parts that produce types).

/// A constant or a reference to a named constant / enum member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Num(i128),
    Ident(String),
}

/// A type specifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    Int,
    UInt,
    Hyper,
    UHyper,
    Bool,
    Float,
    Double,
    Quadruple,
    Opaque,
    String,
    Named(String),
}

/// The shape of a declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeclKind {
    /// `T x`
    Scalar,
    /// `T x[N]`
    Fixed(Value),
    /// `T x<M>` / `T x<>`
    Var(Option<Value>),
    /// `T *x`
    Optional,
}

/// A non-void declaration: `type name`, with array/optional decoration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decl {
    pub name: String,
    pub ty: Type,
    pub kind: DeclKind,
}

/// One `case A: case B: decl;` group of a union (`decl` is `None` for `void`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arm {
    pub labels: Vec<Value>,
    pub decl: Option<Decl>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Union {
    pub name: String,
    pub disc: Decl,
    pub arms: Vec<Arm>,
    /// `Some(None)` is `default: void;`.
    pub default: Option<Option<Decl>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Def {
    Const(String, Value),
    Typedef(Decl),
    Enum(String, Vec<(String, Value)>),
    Struct(String, Vec<Decl>),
    Union(Union),
}

impl Def {
    pub fn name(&self) -> &str {
        match self {
            Def::Const(n, _) | Def::Enum(n, _) | Def::Struct(n, _) => n,
            Def::Typedef(d) => &d.name,
            Def::Union(u) => &u.name,
        }
    }
}

/// A parsed specification, definitions in source order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Spec {
    pub defs: Vec<Def>,
}
