//! Hand-written lexer and recursive-descent parser for the XDR language.

use crate::ast::*;
use crate::Error;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Num(i128),
    Sym(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

fn syntax(line: usize, msg: impl Into<String>) -> Error {
    Error::Syntax {
        line,
        msg: msg.into(),
    }
}

fn parse_number(text: &str, line: usize) -> Result<i128, Error> {
    let (neg, body) = match text.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, text),
    };
    let parsed = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        u128::from_str_radix(h, 16)
    } else if body.len() > 1 && body.starts_with('0') {
        u128::from_str_radix(&body[1..], 8)
    } else {
        body.parse::<u128>()
    };
    let v = parsed.map_err(|e| syntax(line, format!("bad number {text:?}: {e}")))?;
    if v > u64::MAX as u128 {
        return Err(syntax(
            line,
            format!("number {text} does not fit in 64 bits"),
        ));
    }
    let v = v as i128;
    Ok(if neg { -v } else { v })
}

fn lex(src: &str) -> Result<Vec<Token>, Error> {
    let b = src.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    let mut line = 1;
    let mut line_start = true;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            line_start = true;
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'%' && line_start {
            // rpcgen pass-through line: ignored.
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        line_start = false;
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let start = line;
            i += 2;
            loop {
                if i + 1 >= b.len() {
                    return Err(syntax(start, "unterminated comment"));
                }
                if b[i] == b'*' && b[i + 1] == b'/' {
                    i += 2;
                    break;
                }
                if b[i] == b'\n' {
                    line += 1;
                }
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            toks.push(Token {
                tok: Tok::Ident(src[s..i].to_string()),
                line,
            });
            continue;
        }
        if c.is_ascii_digit() || (c == b'-' && b.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            let s = i;
            i += 1;
            while i < b.len() && b[i].is_ascii_alphanumeric() {
                i += 1;
            }
            toks.push(Token {
                tok: Tok::Num(parse_number(&src[s..i], line)?),
                line,
            });
            continue;
        }
        if b"{}[]<>()=;:,*".contains(&c) {
            toks.push(Token {
                tok: Tok::Sym(c as char),
                line,
            });
            i += 1;
            continue;
        }
        return Err(syntax(
            line,
            format!(
                "unexpected character {:?}",
                src[i..].chars().next().unwrap_or('?')
            ),
        ));
    }
    Ok(toks)
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn line(&self) -> usize {
        self.toks
            .get(self.pos)
            .or_else(|| self.toks.last())
            .map_or(0, |t| t.line)
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.tok)
    }

    fn peek2(&self) -> Option<&Tok> {
        self.toks.get(self.pos + 1).map(|t| &t.tok)
    }

    fn err<T>(&self, msg: impl Into<String>) -> Result<T, Error> {
        Err(syntax(self.line(), msg))
    }

    fn next(&mut self) -> Result<Tok, Error> {
        match self.toks.get(self.pos) {
            Some(t) => {
                self.pos += 1;
                Ok(t.tok.clone())
            }
            None => self.err("unexpected end of input"),
        }
    }

    fn is_sym(&self, c: char) -> bool {
        self.peek() == Some(&Tok::Sym(c))
    }

    fn is_kw(&self, kw: &str) -> bool {
        matches!(self.peek(), Some(Tok::Ident(s)) if s == kw)
    }

    fn eat_sym(&mut self, c: char) -> bool {
        if self.is_sym(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn eat_kw(&mut self, kw: &str) -> bool {
        if self.is_kw(kw) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_sym(&mut self, c: char) -> Result<(), Error> {
        if self.eat_sym(c) {
            Ok(())
        } else {
            self.err(format!("expected '{c}', found {:?}", self.peek()))
        }
    }

    fn expect_kw(&mut self, kw: &str) -> Result<(), Error> {
        if self.eat_kw(kw) {
            Ok(())
        } else {
            self.err(format!("expected '{kw}', found {:?}", self.peek()))
        }
    }

    fn ident(&mut self) -> Result<String, Error> {
        match self.next()? {
            Tok::Ident(s) => Ok(s),
            t => {
                self.pos -= 1;
                self.err(format!("expected identifier, found {t:?}"))
            }
        }
    }

    fn value(&mut self) -> Result<Value, Error> {
        match self.next()? {
            Tok::Ident(s) => Ok(Value::Ident(s)),
            Tok::Num(n) => Ok(Value::Num(n)),
            t => {
                self.pos -= 1;
                self.err(format!("expected a constant, found {t:?}"))
            }
        }
    }

    fn spec(&mut self) -> Result<Spec, Error> {
        let mut defs = Vec::new();
        while self.peek().is_some() {
            // Stray semicolons are harmless.
            if self.eat_sym(';') {
                continue;
            }
            let kw = self.ident()?;
            match kw.as_str() {
                "const" => {
                    let name = self.ident()?;
                    self.expect_sym('=')?;
                    let v = self.value()?;
                    self.expect_sym(';')?;
                    defs.push(Def::Const(name, v));
                }
                "typedef" => defs.push(self.typedef()?),
                "enum" => {
                    let name = self.ident()?;
                    let body = self.enum_body()?;
                    self.expect_sym(';')?;
                    defs.push(Def::Enum(name, body));
                }
                "struct" => {
                    let name = self.ident()?;
                    let body = self.struct_body()?;
                    self.expect_sym(';')?;
                    defs.push(Def::Struct(name, body));
                }
                "union" => {
                    let name = self.ident()?;
                    let u = self.union_body(name)?;
                    self.expect_sym(';')?;
                    defs.push(Def::Union(u));
                }
                "program" => self.skip_program()?,
                other => {
                    self.pos -= 1;
                    return self.err(format!("unexpected {other:?} at top level"));
                }
            }
        }
        Ok(Spec { defs })
    }

    fn typedef(&mut self) -> Result<Def, Error> {
        // `typedef enum { ... } name;` and friends.
        let anon = matches!(self.peek2(), Some(Tok::Sym('{')))
            || (self.is_kw("union")
                && matches!(self.peek2(), Some(Tok::Ident(s)) if s == "switch"));
        if anon {
            let kw = self.ident()?;
            let def = match kw.as_str() {
                "enum" => {
                    let body = self.enum_body()?;
                    Def::Enum(self.ident()?, body)
                }
                "struct" => {
                    let body = self.struct_body()?;
                    Def::Struct(self.ident()?, body)
                }
                "union" => {
                    let mut u = self.union_body(String::new())?;
                    u.name = self.ident()?;
                    Def::Union(u)
                }
                other => return self.err(format!("unexpected {other:?} after typedef")),
            };
            self.expect_sym(';')?;
            return Ok(def);
        }
        match self.declaration()? {
            Some(d) => {
                self.expect_sym(';')?;
                Ok(Def::Typedef(d))
            }
            None => self.err("typedef of void"),
        }
    }

    fn enum_body(&mut self) -> Result<Vec<(String, Value)>, Error> {
        self.expect_sym('{')?;
        let mut members = Vec::new();
        loop {
            if self.eat_sym('}') {
                break;
            }
            let name = self.ident()?;
            self.expect_sym('=')?;
            let v = self.value()?;
            members.push((name, v));
            if !self.eat_sym(',') {
                self.expect_sym('}')?;
                break;
            }
        }
        if members.is_empty() {
            return self.err("empty enum");
        }
        Ok(members)
    }

    fn struct_body(&mut self) -> Result<Vec<Decl>, Error> {
        self.expect_sym('{')?;
        let mut fields = Vec::new();
        while !self.eat_sym('}') {
            match self.declaration()? {
                Some(d) => fields.push(d),
                None => return self.err("void member in struct"),
            }
            self.expect_sym(';')?;
        }
        if fields.is_empty() {
            return self.err("empty struct");
        }
        Ok(fields)
    }

    fn union_body(&mut self, name: String) -> Result<Union, Error> {
        self.expect_kw("switch")?;
        self.expect_sym('(')?;
        let disc = match self.declaration()? {
            Some(d) if d.kind == DeclKind::Scalar => d,
            _ => return self.err("union discriminant must be a scalar declaration"),
        };
        self.expect_sym(')')?;
        self.expect_sym('{')?;
        let mut arms = Vec::new();
        let mut default = None;
        while !self.eat_sym('}') {
            if self.eat_kw("default") {
                self.expect_sym(':')?;
                if default.is_some() {
                    return self.err("duplicate default arm");
                }
                default = Some(self.declaration()?);
                self.expect_sym(';')?;
                continue;
            }
            let mut labels = Vec::new();
            while self.eat_kw("case") {
                labels.push(self.value()?);
                self.expect_sym(':')?;
            }
            if labels.is_empty() {
                return self.err(format!(
                    "expected 'case' or 'default', found {:?}",
                    self.peek()
                ));
            }
            let decl = self.declaration()?;
            self.expect_sym(';')?;
            arms.push(Arm { labels, decl });
        }
        if arms.is_empty() {
            return self.err("union without cases");
        }
        Ok(Union {
            name,
            disc,
            arms,
            default,
        })
    }

    fn type_specifier(&mut self) -> Result<Type, Error> {
        let kw = self.ident()?;
        Ok(match kw.as_str() {
            "unsigned" => {
                if self.eat_kw("int") || self.eat_kw("long") {
                    Type::UInt
                } else if self.eat_kw("hyper") {
                    Type::UHyper
                } else {
                    Type::UInt
                }
            }
            "int" | "long" => Type::Int,
            "hyper" => Type::Hyper,
            "bool" => Type::Bool,
            "float" => Type::Float,
            "double" => Type::Double,
            "quadruple" => Type::Quadruple,
            "opaque" => Type::Opaque,
            "string" => Type::String,
            "enum" | "struct" | "union" => {
                if matches!(self.peek(), Some(Tok::Ident(s)) if s != "switch") {
                    Type::Named(self.ident()?)
                } else {
                    return self.err(format!(
                        "anonymous inline {kw} types are not supported; name the type"
                    ));
                }
            }
            _ => Type::Named(kw),
        })
    }

    /// A declaration, `None` for `void`.
    fn declaration(&mut self) -> Result<Option<Decl>, Error> {
        if self.eat_kw("void") {
            return Ok(None);
        }
        let ty = self.type_specifier()?;
        if self.eat_sym('*') {
            let name = self.ident()?;
            if matches!(ty, Type::Opaque | Type::String) {
                return self.err("optional opaque/string is not valid XDR");
            }
            return Ok(Some(Decl {
                name,
                ty,
                kind: DeclKind::Optional,
            }));
        }
        let name = self.ident()?;
        let kind = if self.eat_sym('[') {
            let v = self.value()?;
            self.expect_sym(']')?;
            DeclKind::Fixed(v)
        } else if self.eat_sym('<') {
            let v = if self.is_sym('>') {
                None
            } else {
                Some(self.value()?)
            };
            self.expect_sym('>')?;
            DeclKind::Var(v)
        } else {
            DeclKind::Scalar
        };
        match (&ty, &kind) {
            (Type::Opaque, DeclKind::Scalar) => self.err(format!("opaque {name} needs [n] or <m>")),
            (Type::String, DeclKind::Scalar | DeclKind::Fixed(_)) => {
                self.err(format!("string {name} needs <m>"))
            }
            _ => Ok(Some(Decl { name, ty, kind })),
        }
    }

    fn skip_program(&mut self) -> Result<(), Error> {
        self.ident()?;
        self.expect_sym('{')?;
        let mut depth = 1usize;
        while depth > 0 {
            match self.next()? {
                Tok::Sym('{') => depth += 1,
                Tok::Sym('}') => depth -= 1,
                _ => {}
            }
        }
        self.expect_sym('=')?;
        self.value()?;
        self.expect_sym(';')
    }
}

/// Parse an XDR specification.
pub fn parse(src: &str) -> Result<Spec, Error> {
    let toks = lex(src)?;
    Parser { toks, pos: 0 }.spec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_forms() {
        let src = r#"
%#include <foo.h>
  %passthrough line
const A = 0x10; // hex
const B = -3;
const C = 010;
typedef opaque fh<A>;
typedef unsigned hyper u64_t;
typedef unsigned u32_t;
enum E { X = 1, Y = A };
struct S { int a; string s<>; opaque f[4]; S *next; unsigned int v<B>; };
union U switch (E e) { case X: case Y: int a; default: void; };
program P { version V { void NULLPROC(void) = 0; } = 1; } = 100;
"#;
        let s = parse(src).unwrap();
        assert_eq!(s.defs.len(), 9);
        assert_eq!(s.defs[0], Def::Const("A".into(), Value::Num(16)));
        assert_eq!(s.defs[1], Def::Const("B".into(), Value::Num(-3)));
        assert_eq!(s.defs[2], Def::Const("C".into(), Value::Num(8)));
        assert_eq!(
            s.defs[4],
            Def::Typedef(Decl {
                name: "u64_t".into(),
                ty: Type::UHyper,
                kind: DeclKind::Scalar
            })
        );
        assert_eq!(
            s.defs[5],
            Def::Typedef(Decl {
                name: "u32_t".into(),
                ty: Type::UInt,
                kind: DeclKind::Scalar
            })
        );
        match &s.defs[7] {
            Def::Struct(n, f) => {
                assert_eq!(n, "S");
                assert_eq!(f.len(), 5);
                assert_eq!(f[3].kind, DeclKind::Optional);
                assert_eq!(f[2].kind, DeclKind::Fixed(Value::Num(4)));
            }
            d => panic!("unexpected {d:?}"),
        }
        match &s.defs[8] {
            Def::Union(u) => {
                assert_eq!(u.arms.len(), 1);
                assert_eq!(u.arms[0].labels.len(), 2);
                assert_eq!(u.default, Some(None));
            }
            d => panic!("unexpected {d:?}"),
        }
    }

    #[test]
    fn reports_errors_with_lines() {
        let e = parse("const A = 1;\nstruct S { int a }").unwrap_err();
        assert!(matches!(e, Error::Syntax { line: 2, .. }), "{e}");
        assert!(parse("/* open").is_err());
        assert!(parse("typedef opaque x;").is_err());
    }
}
