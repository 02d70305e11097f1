//! A hand-written reader for MRNet topology files.
//!
//! MRNet reads these files with a bison/flex parser whose messages never
//! reach the caller; vargr reads the same format with a small lexer and a
//! recursive-descent loop that report file, line and column. The format:
//!
//! ```text
//! # comment to end of line (`//` works too)
//! fe:0 => cn:0 cn:1 ;      # the first statement's left side is the root
//! cn:0 => be:0 be:1 ;  cn:1 => be:2   // two statements on one line,
//!         be:3 ;                       // the second one on two lines
//! ```
//!
//! A statement is `host:rank => host:rank … ;`; whitespace (newlines
//! included) may appear anywhere between tokens, and several statements may
//! share a line. `host:rank ;` (no children) is also accepted, which allows
//! a lone front-end. Host names are letters, digits, `.`, `-` and `_`; the
//! rank is a non-negative 32-bit integer. Tree rules (order, duplicates,
//! cycles, reachability) are checked by the validator shared with the TOML
//! form; see [`crate::TopoError`] for the errors.

use crate::error::TopoError;
use crate::statements::{assemble, split_name, Item, Src, Stmt};
use crate::tree::Topology;

/// A token and the byte offset where it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    Word(&'a str),
    Arrow,
    Semi,
    Eof,
}

struct Lexer<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    fn starts(&self, at: usize, pat: &str) -> bool {
        self.text.as_bytes()[at..].starts_with(pat.as_bytes())
    }

    /// Skips whitespace and comments.
    fn skip(&mut self) {
        let b = self.text.as_bytes();
        while self.pos < b.len() {
            if b[self.pos].is_ascii_whitespace() {
                self.pos += 1;
            } else if b[self.pos] == b'#' || self.starts(self.pos, "//") {
                self.pos = self.text[self.pos..]
                    .find('\n')
                    .map_or(b.len(), |i| self.pos + i);
            } else {
                break;
            }
        }
    }

    fn next(&mut self) -> (Tok<'a>, usize) {
        self.skip();
        let b = self.text.as_bytes();
        let start = self.pos;
        if start == b.len() {
            return (Tok::Eof, start);
        }
        if self.starts(start, "=>") {
            self.pos += 2;
            return (Tok::Arrow, start);
        }
        if b[start] == b';' {
            self.pos += 1;
            return (Tok::Semi, start);
        }
        // A word stops at whitespace, `;`, `#`, `=>` and `//`; all ASCII, so
        // the slice boundaries are character boundaries.
        while self.pos < b.len() {
            let c = b[self.pos];
            if c.is_ascii_whitespace()
                || c == b';'
                || c == b'#'
                || self.starts(self.pos, "=>")
                || self.starts(self.pos, "//")
            {
                break;
            }
            self.pos += 1;
        }
        (Tok::Word(&self.text[start..self.pos]), start)
    }
}

fn show(tok: Tok) -> String {
    match tok {
        Tok::Word(w) => format!("`{w}`"),
        Tok::Arrow => "`=>`".into(),
        Tok::Semi => "`;`".into(),
        Tok::Eof => "end of file".into(),
    }
}

/// Parses an MRNet topology file; `file` names it in messages.
pub(crate) fn parse(text: &str, file: &str) -> Result<Topology, TopoError> {
    let src = Src { file, text };
    let stmts = statements(&src)?;
    assemble(&stmts, &src)
}

/// The syntactic pass: statements with their positions.
fn statements<'a>(src: &Src<'a>) -> Result<Vec<Stmt<'a>>, TopoError> {
    let mut lex = Lexer {
        text: src.text,
        pos: 0,
    };
    let syntax = |pos: usize, expected: String, tok: Tok| TopoError::Syntax {
        at: src.loc(pos),
        expected,
        found: show(tok),
    };
    let mut stmts = Vec::new();
    loop {
        let left = match lex.next() {
            (Tok::Eof, _) => break,
            (Tok::Word(w), p) => split_name(w, p, src)?,
            (tok, p) => {
                return Err(syntax(
                    p,
                    "host:rank at the start of a statement".into(),
                    tok,
                ))
            }
        };
        let name = format!("{}:{}", left.host, left.rank);
        match lex.next() {
            (Tok::Arrow, _) => {}
            (Tok::Semi, _) => {
                stmts.push(Stmt {
                    left,
                    children: Vec::new(),
                });
                continue;
            }
            (tok, p) => return Err(syntax(p, format!("`=>` or `;` after {name}"), tok)),
        }
        let mut children: Vec<Item<'a>> = Vec::new();
        loop {
            match lex.next() {
                (Tok::Word(w), p) => children.push(split_name(w, p, src)?),
                (Tok::Semi, _) => break,
                (Tok::Arrow, p) => {
                    // `a => b c => d`: the `;` before `c` is missing.
                    let Some(last) = children.pop() else {
                        return Err(syntax(p, format!("host:rank after {name} =>"), Tok::Arrow));
                    };
                    let start = src.loc(left.pos).line_col();
                    return Err(TopoError::Syntax {
                        at: src.loc(last.pos),
                        expected: format!("`;` to end the statement of {name} at {start}"),
                        found: format!("`{} =>`", last.word),
                    });
                }
                (Tok::Eof, p) => {
                    let start = src.loc(left.pos).line_col();
                    return Err(syntax(
                        p,
                        format!("`;` to end the statement of {name} at {start}"),
                        Tok::Eof,
                    ));
                }
            }
        }
        stmts.push(Stmt { left, children });
    }
    Ok(stmts)
}

impl Topology {
    /// The `# vargr topology: …` first line both text formats start with.
    pub(crate) fn summary_comment(&self) -> String {
        format!(
            "# vargr topology: {} nodes, {} back-ends, depth {}\n",
            self.len(),
            self.num_backends(),
            self.depth()
        )
    }

    /// The MRNet file form: `host:rank => host:rank … ;` for every node with
    /// children, root first, breadth-first; long child lists wrap, eight
    /// names per line. A lone root prints as `host:rank ;`. Re-parseable by
    /// [`Topology::parse_mrnet`]; for a full topology the result is equal.
    pub fn to_mrnet(&self) -> String {
        let mut out = self.summary_comment();
        for n in self.nodes() {
            if n.children.is_empty() {
                if n.id == self.root().id {
                    out.push_str(&format!("{} ;\n", n.name()));
                }
                continue;
            }
            out.push_str(&n.name());
            out.push_str(" =>");
            let wrap = n.children.len() > 8;
            for (i, &c) in n.children.iter().enumerate() {
                out.push_str(if wrap && i % 8 == 0 { "\n    " } else { " " });
                out.push_str(&self.get(c).name());
            }
            out.push_str(" ;\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(text: &str) -> Vec<(Tok<'_>, usize)> {
        let mut lex = Lexer { text, pos: 0 };
        let mut out = Vec::new();
        loop {
            let t = lex.next();
            out.push(t);
            if t.0 == Tok::Eof {
                return out;
            }
        }
    }

    #[test]
    fn lexer_handles_tight_and_commented_input() {
        use Tok::*;
        assert_eq!(
            toks("a:0=>b:1;# c\n//d\n x:2"),
            vec![
                (Word("a:0"), 0),
                (Arrow, 3),
                (Word("b:1"), 5),
                (Semi, 8),
                (Word("x:2"), 18),
                (Eof, 21)
            ]
        );
        assert_eq!(toks("a:0#c=>;"), vec![(Word("a:0"), 0), (Eof, 8)]);
        assert_eq!(toks("a=b"), vec![(Word("a=b"), 0), (Eof, 3)]);
    }

    #[test]
    fn module_doc_example_parses() {
        let doc = "# comment to end of line (`//` works too)
fe:0 => cn:0 cn:1 ;      # the first statement's left side is the root
cn:0 => be:0 be:1 ;  cn:1 => be:2   // two statements on one line,
        be:3 ;                       // the second one on two lines
";
        let t = parse(doc, "doc").unwrap();
        assert_eq!((t.len(), t.num_backends()), (7, 4));
    }

    #[test]
    fn statements_with_and_without_children() {
        let src = Src {
            file: "t",
            text: "a:0 => b:0 c:1 ; b:0 ;",
        };
        let s = statements(&src).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].children.len(), 2);
        assert!(s[1].children.is_empty());
    }
}
