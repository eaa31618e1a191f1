//! Rust code generation from a parsed specification.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use crate::ast::*;
use crate::{Error, Options};

fn sem<T>(msg: impl Into<String>) -> Result<T, Error> {
    Err(Error::Semantic(msg.into()))
}

const KEYWORDS: &[&str] = &[
    "as", "break", "const", "continue", "else", "enum", "extern", "false", "fn", "for", "if",
    "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "static",
    "struct", "trait", "true", "type", "unsafe", "use", "where", "while", "async", "await", "dyn",
    "abstract", "become", "box", "do", "final", "macro", "override", "priv", "typeof", "unsized",
    "virtual", "yield", "try", "gen",
];

/// A Rust identifier for an XDR name (raw identifier for keywords).
fn id(name: &str) -> Result<String, Error> {
    if matches!(name, "self" | "Self" | "super" | "crate" | "_") {
        return sem(format!("{name:?} cannot be used as a Rust identifier"));
    }
    Ok(if KEYWORDS.contains(&name) {
        format!("r#{name}")
    } else {
        name.to_string()
    })
}

/// The primitive a union discriminant reduces to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Disc {
    Enum(String),
    Int,
    UInt,
    Hyper,
    UHyper,
    Bool,
}

enum Named<'a> {
    Typedef(&'a Decl),
    Enum(&'a [(String, Value)]),
    Struct(&'a [Decl]),
    Union,
}

struct Gen<'a> {
    spec: &'a Spec,
    types: HashMap<&'a str, Named<'a>>,
    raw_values: HashMap<&'a str, &'a Value>,
    /// Structs whose last member is a pointer to themselves: generated without that member
    /// and carried as `Vec<S>` where pointed to.
    list_structs: HashSet<String>,
    /// `typedef S *name;` with `S` a list struct: generated as a newtype over `Vec<S>`.
    list_typedefs: HashSet<String>,
    has_float: bool,
    /// Union arms of these types are boxed (`Options::boxed_arms`).
    boxed_arms: HashSet<&'a str>,
    out: String,
}

pub fn generate<'a>(spec: &'a Spec, options: &'a Options) -> Result<String, Error> {
    let mut g = Gen {
        spec,
        boxed_arms: options.boxed_arms.iter().map(String::as_str).collect(),
        types: HashMap::new(),
        raw_values: HashMap::new(),
        list_structs: HashSet::new(),
        list_typedefs: HashSet::new(),
        has_float: false,
        out: String::new(),
    };
    g.index()?;
    g.emit()?;
    Ok(g.out)
}

impl<'a> Gen<'a> {
    fn index(&mut self) -> Result<(), Error> {
        let mut seen: HashMap<&str, &Def> = HashMap::new();
        for def in &self.spec.defs {
            if let Some(prev) = seen.get(def.name()) {
                if *prev == def {
                    continue;
                }
                return sem(format!("{} is defined twice, differently", def.name()));
            }
            seen.insert(def.name(), def);
            match def {
                Def::Const(n, v) => {
                    self.raw_values.insert(n, v);
                }
                Def::Typedef(d) => {
                    self.types.insert(&d.name, Named::Typedef(d));
                }
                Def::Enum(n, members) => {
                    self.types.insert(n, Named::Enum(members));
                    for (m, v) in members {
                        if self.raw_values.insert(m, v).is_some() {
                            return sem(format!("constant {m} is defined twice"));
                        }
                    }
                }
                Def::Struct(n, fields) => {
                    self.types.insert(n, Named::Struct(fields));
                }
                Def::Union(u) => {
                    self.types.insert(&u.name, Named::Union);
                }
            }
        }
        // Check every referenced type exists, and note floats.
        let mut decls: Vec<&Decl> = Vec::new();
        for def in &self.spec.defs {
            match def {
                Def::Typedef(d) => decls.push(d),
                Def::Struct(_, f) => decls.extend(f.iter()),
                Def::Union(u) => {
                    decls.push(&u.disc);
                    decls.extend(u.arms.iter().filter_map(|a| a.decl.as_ref()));
                    if let Some(Some(d)) = &u.default {
                        decls.push(d);
                    }
                }
                _ => {}
            }
        }
        for d in decls {
            match &d.ty {
                Type::Named(n) if !self.types.contains_key(n.as_str()) => {
                    return sem(format!("{}: unknown type {n}", d.name));
                }
                Type::Float | Type::Double => self.has_float = true,
                Type::Quadruple => return sem(format!("{}: quadruple is not supported", d.name)),
                _ => {}
            }
        }
        // Self-referential lists.
        for def in &self.spec.defs {
            if let Def::Struct(n, fields) = def {
                for (i, f) in fields.iter().enumerate() {
                    if let (Type::Named(t), DeclKind::Scalar) = (&f.ty, &f.kind) {
                        if t == n {
                            return sem(format!("struct {n} contains itself without a pointer"));
                        }
                    }
                    if self.pointee(f).as_deref() == Some(n.as_str()) {
                        if i + 1 != fields.len() {
                            return sem(format!(
                                "struct {n}: self pointer {} must be the last member",
                                f.name
                            ));
                        }
                        self.list_structs.insert(n.clone());
                    }
                }
            }
        }
        for def in &self.spec.defs {
            if let Def::Typedef(d) = def {
                if d.kind == DeclKind::Optional {
                    if let Some(p) = self.pointee(d) {
                        if self.list_structs.contains(&p) {
                            self.list_typedefs.insert(d.name.clone());
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// If `d` is (possibly through typedefs) `T *x`, the name `T` resolves to.
    fn pointee(&self, d: &Decl) -> Option<String> {
        let mut d = d;
        for _ in 0..64 {
            match (&d.ty, &d.kind) {
                (Type::Named(t), DeclKind::Optional) => return Some(self.resolve_alias(t)),
                (Type::Named(t), DeclKind::Scalar) => match self.types.get(t.as_str()) {
                    Some(Named::Typedef(td)) => d = td,
                    _ => return None,
                },
                _ => return None,
            }
        }
        None
    }

    /// Follow `typedef T name;` chains of plain named types.
    fn resolve_alias(&self, t: &str) -> String {
        let mut t = t.to_string();
        for _ in 0..64 {
            match self.types.get(t.as_str()) {
                Some(Named::Typedef(Decl {
                    ty: Type::Named(n),
                    kind: DeclKind::Scalar,
                    ..
                })) => t = n.clone(),
                _ => break,
            }
        }
        t
    }

    fn value(&self, v: &Value) -> Result<i128, Error> {
        let mut v = v;
        for _ in 0..64 {
            match v {
                Value::Num(n) => return Ok(*n),
                Value::Ident(name) => match self.raw_values.get(name.as_str()) {
                    Some(next) => v = next,
                    None => return sem(format!("unknown constant {name}")),
                },
            }
        }
        sem("constant definitions are circular")
    }

    fn size(&self, v: &Value) -> Result<usize, Error> {
        let n = self.value(v)?;
        if !(0..=u32::MAX as i128).contains(&n) {
            return sem(format!("size {n} out of range"));
        }
        Ok(n as usize)
    }

    fn max_expr(&self, v: &Option<Value>) -> Result<String, Error> {
        Ok(match v {
            Some(v) => self.size(v)?.to_string(),
            None => "u32::MAX as usize".to_string(),
        })
    }

    fn is_list_ptr(&self, d: &Decl) -> Option<String> {
        if d.kind != DeclKind::Optional {
            return None;
        }
        match &d.ty {
            Type::Named(t) => {
                let t = self.resolve_alias(t);
                self.list_structs.contains(&t).then_some(t)
            }
            _ => None,
        }
    }

    fn base_ty(&self, t: &Type) -> Result<String, Error> {
        Ok(match t {
            Type::Int => "i32".into(),
            Type::UInt => "u32".into(),
            Type::Hyper => "i64".into(),
            Type::UHyper => "u64".into(),
            Type::Bool => "bool".into(),
            Type::Float => "f32".into(),
            Type::Double => "f64".into(),
            Type::Named(n) => id(n)?,
            Type::Quadruple | Type::Opaque | Type::String => {
                return sem(format!("{t:?} cannot be used as a plain type"))
            }
        })
    }

    /// The Rust type of a declaration.
    fn rty(&self, d: &Decl) -> Result<String, Error> {
        Ok(match &d.kind {
            DeclKind::Scalar => self.base_ty(&d.ty)?,
            DeclKind::Fixed(n) => match d.ty {
                Type::Opaque => format!("[u8; {}]", self.size(n)?),
                _ => format!("Vec<{}>", self.base_ty(&d.ty)?),
            },
            DeclKind::Var(_) => match d.ty {
                Type::Opaque | Type::String => "::bytes::Bytes".into(),
                _ => format!("Vec<{}>", self.base_ty(&d.ty)?),
            },
            DeclKind::Optional => match self.is_list_ptr(d) {
                Some(s) => format!("Vec<{}>", id(&s)?),
                None => format!("Option<Box<{}>>", self.base_ty(&d.ty)?),
            },
        })
    }

    fn elem(d: &Decl) -> Decl {
        Decl {
            name: d.name.clone(),
            ty: d.ty.clone(),
            kind: DeclKind::Scalar,
        }
    }

    /// Statements encoding `v` (an expression of type `&rty(d)`) into `out`.
    fn enc(&self, d: &Decl, v: &str, depth: usize) -> Result<String, Error> {
        if depth > 32 {
            return sem(format!("{}: typedefs nest too deeply", d.name));
        }
        Ok(match &d.kind {
            DeclKind::Scalar => match &d.ty {
                Type::Int => format!("::txnfs_xdr::put_i32(out, *{v});"),
                Type::UInt => format!("::txnfs_xdr::put_u32(out, *{v});"),
                Type::Hyper => format!("::txnfs_xdr::put_i64(out, *{v});"),
                Type::UHyper => format!("::txnfs_xdr::put_u64(out, *{v});"),
                Type::Bool => format!("::txnfs_xdr::put_bool(out, *{v});"),
                Type::Float => format!("::txnfs_xdr::put_u32(out, ({v}).to_bits());"),
                Type::Double => format!("::txnfs_xdr::put_u64(out, ({v}).to_bits());"),
                Type::Named(n) => match self.types.get(n.as_str()) {
                    Some(Named::Typedef(td)) if !self.list_typedefs.contains(n) => {
                        self.enc(td, v, depth + 1)?
                    }
                    _ => format!("::txnfs_xdr::Encode::encode({v}, out);"),
                },
                t => return sem(format!("{}: {t:?} cannot be used as a plain type", d.name)),
            },
            DeclKind::Fixed(n) => match d.ty {
                Type::Opaque => format!("::txnfs_xdr::put_fixed_opaque(out, {v});"),
                _ => {
                    let e = format!("e{depth}");
                    format!(
                        "debug_assert_eq!(({v}).len(), {n}, \"fixed-size XDR array {name}\");\n\
                         for {e} in ({v}).iter() {{ {body} }}",
                        n = self.size(n)?,
                        name = d.name,
                        body = self.enc(&Self::elem(d), &e, depth + 1)?
                    )
                }
            },
            DeclKind::Var(_) => match d.ty {
                Type::Opaque | Type::String => format!("::txnfs_xdr::put_opaque(out, {v});"),
                _ => {
                    let e = format!("e{depth}");
                    format!(
                        "::txnfs_xdr::put_u32(out, ({v}).len() as u32);\n\
                         for {e} in ({v}).iter() {{ {body} }}",
                        body = self.enc(&Self::elem(d), &e, depth + 1)?
                    )
                }
            },
            DeclKind::Optional => match self.is_list_ptr(d) {
                Some(_) => format!("::txnfs_xdr::put_list(out, {v});"),
                None => {
                    let x = format!("x{depth}");
                    format!(
                        "match {v} {{\n\
                         Some({x}) => {{ ::txnfs_xdr::put_u32(out, 1); {body} }}\n\
                         None => ::txnfs_xdr::put_u32(out, 0),\n\
                         }}",
                        body = self.enc(&Self::elem(d), &format!("&**{x}"), depth + 1)?
                    )
                }
            },
        })
    }

    /// An expression decoding a value of type `rty(d)` from `src` (uses `?`).
    fn dec(&self, d: &Decl, depth: usize) -> Result<String, Error> {
        if depth > 32 {
            return sem(format!("{}: typedefs nest too deeply", d.name));
        }
        Ok(match &d.kind {
            DeclKind::Scalar => match &d.ty {
                Type::Int => "::txnfs_xdr::get_i32(src)?".into(),
                Type::UInt => "::txnfs_xdr::get_u32(src)?".into(),
                Type::Hyper => "::txnfs_xdr::get_i64(src)?".into(),
                Type::UHyper => "::txnfs_xdr::get_u64(src)?".into(),
                Type::Bool => "::txnfs_xdr::get_bool(src)?".into(),
                Type::Float => "f32::from_bits(::txnfs_xdr::get_u32(src)?)".into(),
                Type::Double => "f64::from_bits(::txnfs_xdr::get_u64(src)?)".into(),
                Type::Named(n) => match self.types.get(n.as_str()) {
                    Some(Named::Typedef(td)) if !self.list_typedefs.contains(n) => {
                        self.dec(td, depth + 1)?
                    }
                    _ => format!("<{} as ::txnfs_xdr::Decode>::decode(src)?", id(n)?),
                },
                t => return sem(format!("{}: {t:?} cannot be used as a plain type", d.name)),
            },
            DeclKind::Fixed(n) => match d.ty {
                Type::Opaque => format!("::txnfs_xdr::get_fixed_opaque::<{}>(src)?", self.size(n)?),
                _ => format!(
                    "__xdr_get_fixed(src, {}, |src| Ok({}))?",
                    self.size(n)?,
                    self.dec(&Self::elem(d), depth + 1)?
                ),
            },
            DeclKind::Var(m) => match d.ty {
                Type::Opaque | Type::String => {
                    format!("::txnfs_xdr::get_opaque(src, {})?", self.max_expr(m)?)
                }
                _ => format!(
                    "__xdr_get_array(src, {}, |src| Ok({}))?",
                    self.max_expr(m)?,
                    self.dec(&Self::elem(d), depth + 1)?
                ),
            },
            DeclKind::Optional => match self.is_list_ptr(d) {
                Some(s) => format!("::txnfs_xdr::get_list::<{}>(src)?", id(&s)?),
                None => format!(
                    "if ::txnfs_xdr::get_bool(src)? {{ Some(Box::new({})) }} else {{ None }}",
                    self.dec(&Self::elem(d), depth + 1)?
                ),
            },
        })
    }

    /// Whether `#[derive(Default)]` works for the Rust type of `d`.
    fn has_default(&self, d: &Decl, depth: usize) -> bool {
        if depth > 64 {
            return false;
        }
        match &d.kind {
            DeclKind::Scalar => match &d.ty {
                Type::Named(n) => match self.types.get(n.as_str()) {
                    Some(Named::Typedef(td)) => {
                        self.list_typedefs.contains(n) || self.has_default(td, depth + 1)
                    }
                    Some(Named::Enum(members)) => self.zero_member(members).is_some(),
                    Some(Named::Struct(fields)) => fields
                        .iter()
                        .filter(|f| self.pointee(f).as_deref() != Some(n.as_str()))
                        .all(|f| self.has_default(f, depth + 1)),
                    Some(Named::Union) | None => false,
                },
                _ => true,
            },
            DeclKind::Fixed(n) => match d.ty {
                Type::Opaque => self.size(n).is_ok_and(|n| n <= 32),
                _ => true,
            },
            DeclKind::Var(_) | DeclKind::Optional => true,
        }
    }

    fn zero_member<'m>(&self, members: &'m [(String, Value)]) -> Option<&'m str> {
        members
            .iter()
            .find(|(_, v)| self.value(v).ok() == Some(0))
            .map(|(m, _)| m.as_str())
    }

    fn derives(&self, extra: &[&str], default: bool) -> String {
        let mut v = vec!["Clone", "Debug", "PartialEq"];
        if !self.has_float {
            v.push("Eq");
            v.push("Hash");
        }
        v.extend_from_slice(extra);
        if default {
            v.push("Default");
        }
        format!("#[derive({})]\n", v.join(", "))
    }

    fn emit(&mut self) -> Result<(), Error> {
        let mut o = String::new();
        o.push_str(
            "// @generated by txnfs-xdrgen. Do not edit: change the .x specification instead.\n\n",
        );
        o.push_str(HELPERS);
        for def in &self.spec.defs {
            // Definitions repeated verbatim are emitted once.
            if !std::ptr::eq(self.first_def(def.name()), def) {
                continue;
            }
            match def {
                Def::Const(n, v) => self.emit_const(&mut o, n, v)?,
                Def::Typedef(d) => self.emit_typedef(&mut o, d)?,
                Def::Enum(n, m) => self.emit_enum(&mut o, n, m)?,
                Def::Struct(n, f) => self.emit_struct(&mut o, n, f)?,
                Def::Union(u) => self.emit_union(&mut o, u)?,
            }
        }
        self.out = o;
        Ok(())
    }

    fn first_def(&self, name: &str) -> &'a Def {
        let spec: &'a Spec = self.spec;
        spec.defs
            .iter()
            .find(|d| d.name() == name)
            .expect("definition indexed by name")
    }

    fn emit_const(&self, o: &mut String, n: &str, v: &Value) -> Result<(), Error> {
        let x = self.value(v)?;
        let ty = if x < 0 {
            "i64"
        } else if x <= u32::MAX as i128 {
            "u32"
        } else {
            "u64"
        };
        writeln!(o, "pub const {}: {ty} = {x};", id(n)?).ok();
        Ok(())
    }

    fn emit_typedef(&self, o: &mut String, d: &Decl) -> Result<(), Error> {
        let name = id(&d.name)?;
        if self.list_typedefs.contains(&d.name) {
            let elem = id(&self.pointee(d).expect("list typedef points to a struct"))?;
            write!(
                o,
                "\n/// XDR `typedef {elem} *{name};` (a linked list, carried as a Vec).\n\
                 {derives}pub struct {name}(pub Vec<{elem}>);\n\
                 impl ::txnfs_xdr::Encode for {name} {{\n\
                 fn encode(&self, out: &mut ::bytes::BytesMut) {{ ::txnfs_xdr::put_list(out, &self.0) }}\n\
                 }}\n\
                 impl ::txnfs_xdr::Decode for {name} {{\n\
                 fn decode(src: &mut ::bytes::Bytes) -> ::txnfs_xdr::Result<Self> {{ Ok({name}(::txnfs_xdr::get_list(src)?)) }}\n\
                 }}\n",
                derives = self.derives(&[], true)
            )
            .ok();
        } else {
            writeln!(o, "pub type {name} = {};", self.rty(d)?).ok();
        }
        Ok(())
    }

    fn emit_enum(&self, o: &mut String, n: &str, members: &[(String, Value)]) -> Result<(), Error> {
        let name = id(n)?;
        let zero = self.zero_member(members);
        let mut seen = HashMap::new();
        let mut body = String::new();
        let mut from = String::new();
        let mut all = String::new();
        let mut names = String::new();
        for (m, v) in members {
            let x = self.value(v)?;
            if !(i32::MIN as i128..=i32::MAX as i128).contains(&x) {
                return sem(format!("enum {n}: {m} = {x} does not fit in an int"));
            }
            if let Some(prev) = seen.insert(x, m) {
                return sem(format!("enum {n}: {m} and {prev} share the value {x}"));
            }
            let mid = id(m)?;
            if zero == Some(m.as_str()) {
                body.push_str("#[default]\n");
            }
            writeln!(body, "{mid} = {x},").ok();
            writeln!(from, "{x} => Some({name}::{mid}),").ok();
            writeln!(all, "{name}::{mid},").ok();
            writeln!(names, "{name}::{mid} => {m:?},").ok();
        }
        write!(
            o,
            "\n{derives}#[repr(i32)]\npub enum {name} {{\n{body}}}\n\
             impl {name} {{\n\
             /// Every member, in specification order.\n\
             pub const VARIANTS: &'static [{name}] = &[\n{all}];\n\
             pub fn from_i32(v: i32) -> Option<Self> {{\nmatch v {{\n{from}_ => None,\n}}\n}}\n\
             /// The member's name as the specification spells it.\n\
             pub const fn name(self) -> &'static str {{\nmatch self {{\n{names}}}\n}}\n\
             }}\n\
             impl ::txnfs_xdr::Encode for {name} {{\n\
             fn encode(&self, out: &mut ::bytes::BytesMut) {{ ::txnfs_xdr::put_i32(out, *self as i32) }}\n\
             }}\n\
             impl ::txnfs_xdr::Decode for {name} {{\n\
             fn decode(src: &mut ::bytes::Bytes) -> ::txnfs_xdr::Result<Self> {{\n\
             let v = ::txnfs_xdr::get_i32(src)?;\n\
             {name}::from_i32(v).ok_or(::txnfs_xdr::XdrError::BadDiscriminant {{ type_name: {n:?}, value: v as i64 }})\n\
             }}\n\
             }}\n",
            derives = self.derives(&["Copy"], zero.is_some()),
        )
        .ok();
        Ok(())
    }

    fn emit_struct(&self, o: &mut String, n: &str, fields: &[Decl]) -> Result<(), Error> {
        let name = id(n)?;
        let is_list = self.list_structs.contains(n);
        let fields: Vec<&Decl> = if is_list {
            fields[..fields.len() - 1].iter().collect()
        } else {
            fields.iter().collect()
        };
        let default = fields.iter().all(|f| self.has_default(f, 0));
        let mut body = String::new();
        let mut enc = String::new();
        let mut dec = String::new();
        for f in &fields {
            let fid = id(&f.name)?;
            writeln!(body, "pub {fid}: {},", self.rty(f)?).ok();
            writeln!(enc, "{}", self.enc(f, &format!("&self.{fid}"), 0)?).ok();
            writeln!(dec, "{fid}: {},", self.dec(f, 0)?).ok();
        }
        let (out, src) = if fields.is_empty() {
            ("_out", "_src")
        } else {
            ("out", "src")
        };
        let doc = if is_list {
            "/// XDR linked-list node: the trailing self pointer is omitted; lists of these are\n\
             /// carried as `Vec` and encoded iteratively.\n"
        } else {
            ""
        };
        write!(
            o,
            "\n{doc}{derives}pub struct {name} {{\n{body}}}\n\
             impl ::txnfs_xdr::Encode for {name} {{\n\
             fn encode(&self, {out}: &mut ::bytes::BytesMut) {{\n{enc}}}\n\
             }}\n\
             impl ::txnfs_xdr::Decode for {name} {{\n\
             fn decode({src}: &mut ::bytes::Bytes) -> ::txnfs_xdr::Result<Self> {{\n\
             Ok({name} {{\n{dec}}})\n\
             }}\n\
             }}\n",
            derives = self.derives(&[], default),
        )
        .ok();
        Ok(())
    }

    fn disc_kind(&self, d: &Decl) -> Result<Disc, Error> {
        let mut d = d;
        for _ in 0..64 {
            if d.kind != DeclKind::Scalar {
                return sem(format!("discriminant {} must be a scalar", d.name));
            }
            return Ok(match &d.ty {
                Type::Int => Disc::Int,
                Type::UInt => Disc::UInt,
                Type::Hyper => Disc::Hyper,
                Type::UHyper => Disc::UHyper,
                Type::Bool => Disc::Bool,
                Type::Named(n) => match self.types.get(n.as_str()) {
                    Some(Named::Typedef(td)) => {
                        d = td;
                        continue;
                    }
                    Some(Named::Enum(_)) => Disc::Enum(n.clone()),
                    _ => return sem(format!("discriminant {} has a non-integral type", d.name)),
                },
                t => return sem(format!("discriminant {} has type {t:?}", d.name)),
            });
        }
        sem("typedefs nest too deeply")
    }

    /// Whether a union arm is carried boxed: a plain use of a type named in
    /// `Options::boxed_arms`.
    fn is_boxed_arm(&self, d: &Decl) -> bool {
        matches!((&d.ty, &d.kind), (Type::Named(n), DeclKind::Scalar) if self.boxed_arms.contains(n.as_str()))
    }

    fn emit_union(&self, o: &mut String, u: &Union) -> Result<(), Error> {
        let name = id(&u.name)?;
        let dk = self.disc_kind(&u.disc)?;
        let dty = self.rty(&u.disc)?;
        // (variant, value, payload decl)
        let mut cases: Vec<(String, i128, Option<&Decl>)> = Vec::new();
        let mut seen_values = HashSet::new();
        for arm in &u.arms {
            for l in &arm.labels {
                let x = self.value(l)?;
                let variant = match l {
                    Value::Ident(s) => id(s)?,
                    Value::Num(n) if *n < 0 => format!("Vneg{}", -n),
                    Value::Num(n) => format!("V{n}"),
                };
                if !seen_values.insert(x) {
                    return sem(format!("union {}: value {x} appears twice", u.name));
                }
                if cases.iter().any(|c| c.0 == variant) {
                    return sem(format!("union {}: label {variant} appears twice", u.name));
                }
                let ok = match &dk {
                    Disc::Int | Disc::Enum(_) => (i32::MIN as i128..=i32::MAX as i128).contains(&x),
                    Disc::UInt => (0..=u32::MAX as i128).contains(&x),
                    Disc::Hyper => (i64::MIN as i128..=i64::MAX as i128).contains(&x),
                    Disc::UHyper => (0..=u64::MAX as i128).contains(&x),
                    Disc::Bool => x == 0 || x == 1,
                };
                if !ok {
                    return sem(format!("union {}: label value {x} out of range", u.name));
                }
                cases.push((variant, x, arm.decl.as_ref()));
            }
        }
        let lit = |x: i128| -> String {
            match dk {
                Disc::Bool => (x == 1).to_string(),
                _ => x.to_string(),
            }
        };
        let put_disc = |x: &str| -> String {
            match &dk {
                Disc::Enum(_) | Disc::Int => format!("::txnfs_xdr::put_i32(out, {x});"),
                Disc::UInt => format!("::txnfs_xdr::put_u32(out, {x});"),
                Disc::Hyper => format!("::txnfs_xdr::put_i64(out, {x});"),
                Disc::UHyper => format!("::txnfs_xdr::put_u64(out, {x});"),
                Disc::Bool => format!("::txnfs_xdr::put_bool(out, {x});"),
            }
        };
        let get_disc = match &dk {
            Disc::Enum(_) | Disc::Int => "::txnfs_xdr::get_i32(src)?",
            Disc::UInt => "::txnfs_xdr::get_u32(src)?",
            Disc::Hyper => "::txnfs_xdr::get_i64(src)?",
            Disc::UHyper => "::txnfs_xdr::get_u64(src)?",
            Disc::Bool => "::txnfs_xdr::get_bool(src)?",
        };
        let mut body = String::new();
        let mut enc = String::new();
        let mut dec = String::new();
        let mut discf = String::new();
        for (variant, x, decl) in &cases {
            let dval = match &dk {
                Disc::Enum(e) => {
                    let members = match self.types.get(e.as_str()) {
                        Some(Named::Enum(m)) => m,
                        _ => return sem(format!("{e} is not an enum")),
                    };
                    let m = members
                        .iter()
                        .find(|(_, v)| self.value(v).ok() == Some(*x))
                        .map(|(m, _)| m);
                    match m {
                        Some(m) => format!("{}::{}", id(e)?, id(m)?),
                        None => {
                            return sem(format!(
                                "union {}: label value {x} is not a member of {e}",
                                u.name
                            ))
                        }
                    }
                }
                _ => lit(*x),
            };
            let dlit = lit(*x);
            match decl {
                Some(d) => {
                    // A boxed arm holds `Box<T>`: encoded through `&**x`, decoded into a box.
                    let (ty, x, (dec_open, dec_close)) = if self.is_boxed_arm(d) {
                        (format!("Box<{}>", self.rty(d)?), "&**x", ("Box::new(", ")"))
                    } else {
                        (self.rty(d)?, "x", ("", ""))
                    };
                    writeln!(body, "{variant}({ty}),").ok();
                    writeln!(
                        enc,
                        "{name}::{variant}(x) => {{ {} {} }}",
                        put_disc(&dlit),
                        self.enc(d, x, 0)?
                    )
                    .ok();
                    writeln!(
                        dec,
                        "{dlit} => {name}::{variant}({dec_open}{}{dec_close}),",
                        self.dec(d, 0)?
                    )
                    .ok();
                    writeln!(discf, "{name}::{variant}(..) => {dval},").ok();
                }
                None => {
                    writeln!(body, "{variant},").ok();
                    writeln!(enc, "{name}::{variant} => {{ {} }}", put_disc(&dlit)).ok();
                    writeln!(dec, "{dlit} => {name}::{variant},").ok();
                    writeln!(discf, "{name}::{variant} => {dval},").ok();
                }
            }
        }
        let exhaustive = dk == Disc::Bool && cases.len() == 2;
        let enc_default_disc = match &dk {
            Disc::Enum(_) => "::txnfs_xdr::Encode::encode(d, out);".to_string(),
            _ => put_disc("*d"),
        };
        let default_value = match &dk {
            Disc::Enum(e) => format!(
                "{}::from_i32(__d).ok_or(::txnfs_xdr::XdrError::BadDiscriminant {{ type_name: {e:?}, value: __d as i64 }})?",
                id(e)?
            ),
            _ => "__d".to_string(),
        };
        match &u.default {
            Some(Some(d)) => {
                writeln!(body, "default({dty}, {}),", self.rty(d)?).ok();
                writeln!(
                    enc,
                    "{name}::default(d, x) => {{ {enc_default_disc} {} }}",
                    self.enc(d, "x", 0)?
                )
                .ok();
                if !exhaustive {
                    writeln!(
                        dec,
                        "_ => {{ let __v = {default_value}; {name}::default(__v, {}) }}",
                        self.dec(d, 0)?
                    )
                    .ok();
                }
                writeln!(discf, "{name}::default(d, _) => *d,").ok();
            }
            Some(None) => {
                writeln!(body, "default({dty}),").ok();
                writeln!(enc, "{name}::default(d) => {{ {enc_default_disc} }}").ok();
                if !exhaustive {
                    writeln!(dec, "_ => {name}::default({default_value}),").ok();
                }
                writeln!(discf, "{name}::default(d) => *d,").ok();
            }
            None => {
                if !exhaustive {
                    writeln!(
                        dec,
                        "_ => return Err(::txnfs_xdr::XdrError::BadDiscriminant {{ type_name: {:?}, value: __d as i64 }}),",
                        u.name
                    )
                    .ok();
                }
            }
        }
        write!(
            o,
            "\n{derives}pub enum {name} {{\n{body}}}\n\
             impl {name} {{\n\
             /// The value of the union's discriminant `{disc}`.\n\
             pub fn discriminant(&self) -> {dty} {{\nmatch self {{\n{discf}}}\n}}\n\
             }}\n\
             impl ::txnfs_xdr::Encode for {name} {{\n\
             fn encode(&self, out: &mut ::bytes::BytesMut) {{\nmatch self {{\n{enc}}}\n}}\n\
             }}\n\
             impl ::txnfs_xdr::Decode for {name} {{\n\
             fn decode(src: &mut ::bytes::Bytes) -> ::txnfs_xdr::Result<Self> {{\n\
             let __d = {get_disc};\n\
             Ok(match __d {{\n{dec}}})\n\
             }}\n\
             }}\n",
            derives = self.derives(&[], false),
            disc = u.disc.name,
        )
        .ok();
        Ok(())
    }
}

const HELPERS: &str = r#"/// Decode a counted array with a per-element decoder, never trusting the count for
/// allocation (every XDR item is at least 4 bytes).
#[allow(dead_code)]
fn __xdr_get_array<T>(
    src: &mut ::bytes::Bytes,
    max: usize,
    f: impl FnMut(&mut ::bytes::Bytes) -> ::txnfs_xdr::Result<T>,
) -> ::txnfs_xdr::Result<Vec<T>> {
    let len = ::txnfs_xdr::get_u32(src)? as usize;
    if len > max {
        return Err(::txnfs_xdr::XdrError::TooLong { len, max });
    }
    __xdr_get_fixed(src, len, f)
}

/// Decode a fixed-size (`T x[N]`) array of exactly `n` elements.
#[allow(dead_code)]
fn __xdr_get_fixed<T>(
    src: &mut ::bytes::Bytes,
    n: usize,
    mut f: impl FnMut(&mut ::bytes::Bytes) -> ::txnfs_xdr::Result<T>,
) -> ::txnfs_xdr::Result<Vec<T>> {
    let mut v = Vec::with_capacity(n.min(::bytes::Buf::remaining(src) / 4));
    for _ in 0..n {
        v.push(f(src)?);
    }
    Ok(v)
}
"#;

#[cfg(test)]
mod tests {
    use crate::{generate, Error};

    fn gen_ok(src: &str) -> String {
        generate(src).unwrap_or_else(|e| panic!("{e}"))
    }

    fn gen_err(src: &str) -> String {
        match generate(src) {
            Err(Error::Semantic(m)) => m,
            other => panic!("expected a semantic error, got {other:?}"),
        }
    }

    #[test]
    fn names_and_mappings() {
        let out = gen_ok(
            "const N = 2; const BIG = 0x100000000; const NEG = -1;
             typedef opaque fh<N>;
             enum e { A = 0, B = N };
             struct s { int type; fh h; e kind; s *next; };
             struct l { s *items; unsigned hyper x; string n<>; opaque v[4]; };
             union u switch (e d) { case A: void; case B: l lst; default: int z; };",
        );
        for want in [
            "pub const N: u32 = 2;",
            "pub const BIG: u64 = 4294967296;",
            "pub const NEG: i64 = -1;",
            "pub type fh = ::bytes::Bytes;",
            "#[repr(i32)]\npub enum e {\n#[default]\nA = 0,\nB = 2,\n}",
            "pub r#type: i32,",
            "pub items: Vec<s>,",
            "pub v: [u8; 4],",
            "pub n: ::bytes::Bytes,",
            "A,\nB(l),\ndefault(e, i32),",
            "get_opaque(src, 2)?",
            "put_list(out, &self.items)",
            "get_list::<s>(src)?",
            "pub fn discriminant(&self) -> e",
            "pub fn from_i32(v: i32) -> Option<Self>",
            "pub const VARIANTS: &'static [e] = &[\ne::A,\ne::B,\n];",
            "e::B => \"B\",",
        ] {
            assert!(out.contains(want), "missing {want:?} in:\n{out}");
        }
        // The self pointer is not a member of the Rust struct.
        assert!(!out.contains("pub next"), "{out}");
        assert!(out.contains("Clone, Debug, PartialEq, Eq, Hash"));
    }

    #[test]
    fn arms_of_named_types_are_boxed_on_request() {
        let src = "struct big { hyper a; hyper b; hyper c; };
             union u switch (int d) { case 1: big b; case 2: int x; case 3: big many<>; };";
        let options = crate::Options {
            boxed_arms: vec!["big".into()],
        };
        let out = crate::generate_with(src, &options).unwrap_or_else(|e| panic!("{e}"));
        for want in [
            "V1(Box<big>),",
            "V2(i32),",
            // Only a plain use is boxed: a list is small already.
            "V3(Vec<big>),",
            "1 => u::V1(Box::new(<big as ::txnfs_xdr::Decode>::decode(src)?)),",
            "u::V1(x) => { ::txnfs_xdr::put_i32(out, 1); ::txnfs_xdr::Encode::encode(&**x, out); }",
        ] {
            assert!(out.contains(want), "missing {want:?} in:\n{out}");
        }
        assert!(
            !gen_ok(src).contains("Box<big>"),
            "boxed without being asked"
        );
    }

    #[test]
    fn identical_duplicates_are_emitted_once() {
        let out = gen_ok("struct a { int x; }; struct a { int x; };");
        assert_eq!(out.matches("pub struct a ").count(), 1);
    }

    #[test]
    fn floats_drop_eq() {
        let out = gen_ok("struct f { float x; double y; };");
        assert!(
            out.contains("#[derive(Clone, Debug, PartialEq, Default)]"),
            "{out}"
        );
        assert!(out.contains("pub x: f32,") && out.contains("pub y: f64,"));
    }

    #[test]
    fn semantic_errors() {
        assert!(gen_err("struct a { b x; };").contains("unknown type b"));
        assert!(gen_err("struct a { a *n; int x; };").contains("must be the last member"));
        assert!(gen_err("struct a { int x; }; struct a { int y; };").contains("defined twice"));
        assert!(gen_err("struct a { a x; };").contains("without a pointer"));
        assert!(gen_err("enum e { A = 1, B = 1 };").contains("share the value"));
        assert!(
            gen_err("enum e { A = 1 }; union u switch (e d) { case 2: void; };")
                .contains("not a member of e")
        );
        assert!(gen_err("union u switch (bool b) { case 2: void; };").contains("out of range"));
        assert!(gen_err("struct a { quadruple q; };").contains("quadruple"));
        assert!(gen_err("struct a { opaque x<M>; };").contains("unknown constant M"));
        assert!(
            gen_err("const A = B; const B = A; struct s { opaque x<A>; };").contains("circular")
        );
    }
}
