//! ECMA-262 regular expression syntax (JSON Schema's `pattern` dialect),
//! read with the `u` flag's semantics: a pattern matches code points, `\w`,
//! `\d` and `\b` are ASCII, `\s` is ECMA's whitespace set, `.` excludes the
//! four line terminators, `^`/`$` anchor the whole string (no flags).
//!
//! The parser is generic over its output ([`Out`]): [`Build`] makes a
//! regex-syntax HIR for the DFA compiled on the control path; [`Check`]
//! only validates, with zero-sized nodes so that it allocates nothing, for
//! the hot path's `format: "regex"`. Errors are static strings.
//!
//! Refused (the DFA cannot express them, or their meaning is not the one a
//! reader would expect; see docs/design.md): back-references (`\1`,
//! `\k<name>`), lookahead and lookbehind, octal escapes, escapes of ASCII
//! letters ECMA-262 does not define (`\a`, `\z`, ...), lone surrogates.
//! Accepted beyond the `u` flag's strict grammar (Annex B leniency that
//! real schemas rely on): a literal `]`, `}` or a `{` that starts no
//! quantifier, and identity escapes of ASCII punctuation such as `\-`.

use regex_syntax::hir::{Class, ClassUnicode, ClassUnicodeRange, Hir, Look, Repetition};

/// Deepest group nesting.
pub(crate) const NEST_MAX: usize = 32;
/// Largest repetition count in `{n,m}`.
pub(crate) const REPEAT_MAX: u32 = 1000;

/// A named character class.
#[derive(Clone, Copy)]
pub(crate) enum Named {
    Digit,
    Word,
    Space,
    /// `.`
    Dot,
}

/// What the parser produces.
pub(crate) trait Out {
    /// Validation only: constructs the DFA cannot express (lookaround,
    /// back-references) are valid syntax.
    const SYNTAX_ONLY: bool;
    type Node;
    type Set;
    fn set() -> Self::Set;
    fn range(set: &mut Self::Set, a: char, b: char);
    fn union(set: &mut Self::Set, other: Self::Set);
    fn negate(set: &mut Self::Set);
    fn named(n: Named) -> Self::Set;
    fn property(name: &str) -> Result<Self::Set, &'static str>;
    fn class(set: Self::Set) -> Self::Node;
    fn literal(c: char) -> Self::Node;
    fn look(l: Look) -> Self::Node;
    fn repeat(n: Self::Node, min: u32, max: Option<u32>) -> Self::Node;
    fn concat(v: Vec<Self::Node>) -> Self::Node;
    fn alt(v: Vec<Self::Node>) -> Self::Node;
}

/// Validation only; nodes are `()` so vectors of them never allocate.
pub(crate) struct Check;

impl Out for Check {
    const SYNTAX_ONLY: bool = true;
    type Node = ();
    type Set = ();
    fn set() {}
    fn range(_: &mut (), _: char, _: char) {}
    fn union(_: &mut (), _: ()) {}
    fn negate(_: &mut ()) {}
    fn named(_: Named) {}
    fn property(name: &str) -> Result<(), &'static str> {
        // The name is not looked up (that needs the Unicode tables of
        // regex-syntax, which allocate): only its shape is checked.
        if name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'=')
        {
            Ok(())
        } else {
            Err("invalid Unicode property name")
        }
    }
    fn class(_: ()) {}
    fn literal(_: char) {}
    fn look(_: Look) {}
    fn repeat(_: (), _: u32, _: Option<u32>) {}
    fn concat(_: Vec<()>) {}
    fn alt(_: Vec<()>) {}
}

/// HIR for the DFA.
pub(crate) struct Build;

fn ranges(r: &[(char, char)]) -> ClassUnicode {
    ClassUnicode::new(r.iter().map(|&(a, b)| ClassUnicodeRange::new(a, b)))
}

impl Out for Build {
    const SYNTAX_ONLY: bool = false;
    type Node = Hir;
    type Set = ClassUnicode;
    fn set() -> ClassUnicode {
        ClassUnicode::empty()
    }
    fn range(set: &mut ClassUnicode, a: char, b: char) {
        set.push(ClassUnicodeRange::new(a, b));
    }
    fn union(set: &mut ClassUnicode, other: ClassUnicode) {
        set.union(&other);
    }
    fn negate(set: &mut ClassUnicode) {
        set.negate();
    }
    fn named(n: Named) -> ClassUnicode {
        match n {
            Named::Digit => ranges(&[('0', '9')]),
            Named::Word => ranges(&[('0', '9'), ('A', 'Z'), ('_', '_'), ('a', 'z')]),
            // ECMA-262 WhiteSpace and LineTerminator.
            Named::Space => ranges(&[
                ('\t', '\r'),
                (' ', ' '),
                ('\u{a0}', '\u{a0}'),
                ('\u{1680}', '\u{1680}'),
                ('\u{2000}', '\u{200a}'),
                ('\u{2028}', '\u{2029}'),
                ('\u{202f}', '\u{202f}'),
                ('\u{205f}', '\u{205f}'),
                ('\u{3000}', '\u{3000}'),
                ('\u{feff}', '\u{feff}'),
            ]),
            Named::Dot => {
                let mut c = ranges(&[('\n', '\n'), ('\r', '\r'), ('\u{2028}', '\u{2029}')]);
                c.negate();
                c
            }
        }
    }
    fn property(name: &str) -> Result<ClassUnicode, &'static str> {
        Check::property(name)?;
        let hir = regex_syntax::ParserBuilder::new()
            .build()
            .parse(&format!("\\p{{{name}}}"))
            .map_err(|_| "unknown Unicode property")?;
        match hir.into_kind() {
            regex_syntax::hir::HirKind::Class(Class::Unicode(c)) => Ok(c),
            _ => Err("unknown Unicode property"),
        }
    }
    fn class(set: ClassUnicode) -> Hir {
        Hir::class(Class::Unicode(set))
    }
    fn literal(c: char) -> Hir {
        let mut b = [0u8; 4];
        Hir::literal(c.encode_utf8(&mut b).as_bytes())
    }
    fn look(l: Look) -> Hir {
        Hir::look(l)
    }
    fn repeat(n: Hir, min: u32, max: Option<u32>) -> Hir {
        Hir::repetition(Repetition {
            min,
            max,
            greedy: true,
            sub: Box::new(n),
        })
    }
    fn concat(v: Vec<Hir>) -> Hir {
        Hir::concat(v)
    }
    fn alt(v: Vec<Hir>) -> Hir {
        Hir::alternation(v)
    }
}

enum Atom<O: Out> {
    Char(char),
    Set(O::Set),
}

struct Parser<'a, O: Out> {
    s: &'a str,
    i: usize,
    _o: std::marker::PhantomData<O>,
}

/// Parses `pattern`.
pub(crate) fn parse<O: Out>(pattern: &str) -> Result<O::Node, &'static str> {
    let mut p = Parser::<O> {
        s: pattern,
        i: 0,
        _o: std::marker::PhantomData,
    };
    let node = p.disjunction(0)?;
    if p.i != p.s.len() {
        return Err("unmatched ')'");
    }
    Ok(node)
}

fn hex(c: char) -> Option<u32> {
    c.to_digit(16)
}

impl<O: Out> Parser<'_, O> {
    fn peek(&self) -> Option<char> {
        self.s[self.i..].chars().next()
    }

    fn peek2(&self) -> Option<char> {
        let mut it = self.s[self.i..].chars();
        it.next();
        it.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.i += c.len_utf8();
        Some(c)
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.i += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn rest(&self) -> &str {
        &self.s[self.i..]
    }

    fn disjunction(&mut self, depth: usize) -> Result<O::Node, &'static str> {
        let mut alts = vec![self.alternative(depth)?];
        while self.eat('|') {
            alts.push(self.alternative(depth)?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().ok_or("empty pattern")?
        } else {
            O::alt(alts)
        })
    }

    fn alternative(&mut self, depth: usize) -> Result<O::Node, &'static str> {
        let mut items = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            items.push(self.term(depth)?);
        }
        Ok(O::concat(items))
    }

    fn term(&mut self, depth: usize) -> Result<O::Node, &'static str> {
        let look = match (self.peek(), self.peek2()) {
            (Some('^'), _) => Some((Look::Start, 1)),
            (Some('$'), _) => Some((Look::End, 1)),
            (Some('\\'), Some('b')) => Some((Look::WordAscii, 2)),
            (Some('\\'), Some('B')) => Some((Look::WordAsciiNegate, 2)),
            _ => None,
        };
        if let Some((l, len)) = look {
            self.i += len;
            if self.quantifier_here() {
                return Err("nothing to repeat (an assertion cannot be quantified)");
            }
            return Ok(O::look(l));
        }
        let r = self.rest();
        let lookaround = [("(?=", 3), ("(?!", 3), ("(?<=", 4), ("(?<!", 4)]
            .into_iter()
            .find(|(p, _)| r.starts_with(p));
        if O::SYNTAX_ONLY
            && let Some((_, len)) = lookaround
        {
            if depth >= NEST_MAX {
                return Err("groups nested deeper than NEST_MAX (32)");
            }
            self.i += len;
            let sub = self.disjunction(depth + 1)?;
            if !self.eat(')') {
                return Err("unterminated group");
            }
            return Ok(sub);
        }
        if r.starts_with("(?=") || r.starts_with("(?!") {
            return Err("lookahead is not supported (the DFA engine cannot express it)");
        }
        if r.starts_with("(?<=") || r.starts_with("(?<!") {
            return Err("lookbehind is not supported (the DFA engine cannot express it)");
        }
        let atom = self.atom(depth)?;
        let Some((min, max)) = self.quantifier()? else {
            return Ok(atom);
        };
        self.eat('?'); // lazy: the same set of matches
        if self.quantifier_here() {
            return Err("nothing to repeat (a quantifier follows a quantifier)");
        }
        Ok(O::repeat(atom, min, max))
    }

    /// Whether a quantifier starts here (a `{` counts only when it forms one).
    fn quantifier_here(&self) -> bool {
        match self.peek() {
            Some('*' | '+' | '?') => true,
            Some('{') => Self::braces(self.rest()).is_some(),
            _ => false,
        }
    }

    /// `{n}`, `{n,}` or `{n,m}` at the start of `r`: (min, max, length).
    fn braces(r: &str) -> Option<(u64, Option<u64>, usize)> {
        let b = r.as_bytes();
        let mut i = 1;
        let num = |i: &mut usize| -> Option<u64> {
            let start = *i;
            let mut v: u64 = 0;
            while let Some(d) = b.get(*i).filter(|d| d.is_ascii_digit()) {
                v = v.saturating_mul(10).saturating_add(u64::from(d - b'0'));
                *i += 1;
            }
            (*i > start).then_some(v)
        };
        let min = num(&mut i)?;
        let max = if b.get(i) == Some(&b',') {
            i += 1;
            num(&mut i)
        } else {
            Some(min)
        };
        (b.get(i) == Some(&b'}')).then_some((min, max, i + 1))
    }

    fn quantifier(&mut self) -> Result<Option<(u32, Option<u32>)>, &'static str> {
        let q = match self.peek() {
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('?') => (0, Some(1)),
            Some('{') => match Self::braces(self.rest()) {
                Some((min, max, len)) => {
                    let cap = u64::from(REPEAT_MAX);
                    if min > cap || max.is_some_and(|m| m > cap) {
                        return Err("repetition count above REPEAT_MAX (1000)");
                    }
                    if max.is_some_and(|m| m < min) {
                        return Err("numbers out of order in {} quantifier");
                    }
                    self.i += len - 1;
                    (min as u32, max.map(|m| m as u32))
                }
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
        self.i += 1;
        Ok(Some(q))
    }

    fn atom(&mut self, depth: usize) -> Result<O::Node, &'static str> {
        let Some(c) = self.bump() else {
            return Err("unexpected end of pattern");
        };
        Ok(match c {
            '.' => O::class(O::named(Named::Dot)),
            '(' => {
                if depth >= NEST_MAX {
                    return Err("groups nested deeper than NEST_MAX (32)");
                }
                if self.rest().starts_with("?:") {
                    self.i += 2;
                } else if self.rest().starts_with("?<") {
                    self.i += 2;
                    self.group_name()?;
                } else if self.peek() == Some('?') {
                    return Err("invalid group");
                }
                let sub = self.disjunction(depth + 1)?;
                if !self.eat(')') {
                    return Err("unterminated group");
                }
                sub
            }
            ')' => return Err("unmatched ')'"),
            '[' => self.class()?,
            '\\' => self.atom_escape()?,
            '*' | '+' | '?' => return Err("nothing to repeat"),
            '{' if Self::braces(&self.s[self.i - 1..]).is_some() => {
                return Err("nothing to repeat");
            }
            c => O::literal(c),
        })
    }

    fn group_name(&mut self) -> Result<(), &'static str> {
        let mut first = true;
        loop {
            match self.bump() {
                Some('>') if !first => return Ok(()),
                Some(c) if c == '$' || c == '_' || c.is_alphabetic() => {}
                Some(c) if !first && c.is_alphanumeric() => {}
                _ => return Err("invalid group name"),
            }
            first = false;
        }
    }

    fn property(&mut self, negated: bool) -> Result<O::Set, &'static str> {
        if !self.eat('{') {
            return Err("\\p and \\P need {name}");
        }
        let start = self.i;
        let Some(len) = self.rest().find('}') else {
            return Err("unterminated \\p{...}");
        };
        self.i += len + 1;
        let mut set = O::property(&self.s[start..start + len])?;
        if negated {
            O::negate(&mut set);
        }
        Ok(set)
    }

    fn class_escape(&mut self, c: char) -> Result<Option<O::Set>, &'static str> {
        let (named, neg) = match c {
            'd' => (Named::Digit, false),
            'D' => (Named::Digit, true),
            'w' => (Named::Word, false),
            'W' => (Named::Word, true),
            's' => (Named::Space, false),
            'S' => (Named::Space, true),
            'p' => return self.property(false).map(Some),
            'P' => return self.property(true).map(Some),
            _ => return Ok(None),
        };
        let mut set = O::named(named);
        if neg {
            O::negate(&mut set);
        }
        Ok(Some(set))
    }

    fn atom_escape(&mut self) -> Result<O::Node, &'static str> {
        let Some(c) = self.bump() else {
            return Err("\\ at end of pattern");
        };
        if let Some(set) = self.class_escape(c)? {
            return Ok(O::class(set));
        }
        match c {
            '1'..='9' if O::SYNTAX_ONLY => {
                while self.peek().is_some_and(|d| d.is_ascii_digit()) {
                    self.i += 1;
                }
                Ok(O::literal(c))
            }
            'k' if O::SYNTAX_ONLY => {
                if !self.eat('<') {
                    return Err("\\k needs <name>");
                }
                self.group_name()?;
                Ok(O::literal(c))
            }
            '1'..='9' => {
                Err("back-references are not supported (the DFA engine cannot express them)")
            }
            'k' => {
                Err("named back-references are not supported (the DFA engine cannot express them)")
            }
            c => Ok(O::literal(self.char_escape(c)?)),
        }
    }

    /// A CharacterEscape whose letter `c` was just read.
    fn char_escape(&mut self, c: char) -> Result<char, &'static str> {
        Ok(match c {
            't' => '\t',
            'n' => '\n',
            'v' => '\u{b}',
            'f' => '\u{c}',
            'r' => '\r',
            '0' => {
                if self.peek().is_some_and(|d| d.is_ascii_digit()) {
                    return Err("octal escapes are not supported");
                }
                '\0'
            }
            'c' => match self.bump() {
                Some(l) if l.is_ascii_alphabetic() => char::from(l as u8 % 32),
                _ => return Err("\\c must be followed by an ASCII letter"),
            },
            'x' => {
                let (Some(a), Some(b)) = (self.bump().and_then(hex), self.bump().and_then(hex))
                else {
                    return Err("\\x needs two hex digits");
                };
                char::from_u32(a * 16 + b).ok_or("invalid \\x escape")?
            }
            'u' => self.unicode_escape()?,
            c if c.is_ascii_alphanumeric() => {
                return Err(
                    "not an ECMA-262 escape (only \\t \\n \\v \\f \\r \\0 \\c \\x \\u \\d \\D \\w \\W \\s \\S \\p \\P \\b \\B are letters)",
                );
            }
            c => c,
        })
    }

    fn hex4(&mut self) -> Option<u32> {
        let mut v = 0;
        for _ in 0..4 {
            v = v * 16 + hex(self.bump()?)?;
        }
        Some(v)
    }

    fn unicode_escape(&mut self) -> Result<char, &'static str> {
        if self.eat('{') {
            let mut v: u32 = 0;
            let mut digits = 0;
            while let Some(d) = self.peek().and_then(hex) {
                self.i += 1;
                v = v.saturating_mul(16).saturating_add(d);
                digits += 1;
            }
            if digits == 0 || !self.eat('}') {
                return Err("invalid \\u{...} escape");
            }
            return char::from_u32(v).ok_or("\\u{...} is not a Unicode scalar value");
        }
        let Some(hi) = self.hex4() else {
            return Err("\\u needs four hex digits");
        };
        if (0xD800..0xDC00).contains(&hi) && self.rest().starts_with("\\u") {
            let save = self.i;
            self.i += 2;
            if let Some(lo @ 0xDC00..=0xDFFF) = self.hex4() {
                let cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                return char::from_u32(cp).ok_or("invalid surrogate pair");
            }
            self.i = save;
        }
        char::from_u32(hi).ok_or("lone surrogate: it cannot occur in valid UTF-8 text")
    }

    fn class_atom(&mut self) -> Result<Atom<O>, &'static str> {
        let Some(c) = self.bump() else {
            return Err("unterminated character class");
        };
        if c != '\\' {
            return Ok(Atom::Char(c));
        }
        let Some(e) = self.bump() else {
            return Err("\\ at end of pattern");
        };
        if let Some(set) = self.class_escape(e)? {
            return Ok(Atom::Set(set));
        }
        Ok(Atom::Char(match e {
            'b' => '\u{8}',
            '-' => '-',
            '1'..='9' => return Err("octal escapes are not supported"),
            'B' => return Err("\\B is not valid in a character class"),
            e => self.char_escape(e)?,
        }))
    }

    fn class(&mut self) -> Result<O::Node, &'static str> {
        let negated = self.eat('^');
        let mut set = O::set();
        loop {
            match self.peek() {
                None => return Err("unterminated character class"),
                Some(']') => {
                    self.i += 1;
                    break;
                }
                _ => {}
            }
            let first = self.class_atom()?;
            if self.peek() == Some('-') && !matches!(self.peek2(), Some(']') | None) {
                self.i += 1;
                let second = self.class_atom()?;
                match (first, second) {
                    (Atom::Char(a), Atom::Char(b)) => {
                        if a > b {
                            return Err("range out of order in character class");
                        }
                        O::range(&mut set, a, b);
                    }
                    (a, b) => {
                        // Annex B: a class escape at either end makes '-' literal.
                        for x in [a, Atom::Char('-'), b] {
                            match x {
                                Atom::Char(c) => O::range(&mut set, c, c),
                                Atom::Set(s) => O::union(&mut set, s),
                            }
                        }
                    }
                }
                continue;
            }
            match first {
                Atom::Char(c) => O::range(&mut set, c, c),
                Atom::Set(s) => O::union(&mut set, s),
            }
        }
        if negated {
            O::negate(&mut set);
        }
        Ok(O::class(set))
    }
}
