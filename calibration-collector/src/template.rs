//! `run --cmd` templates: `python job.py --len {seq_len} --batch {batch}`.
//!
//! Placeholders: `{seq_len}`, `{batch}`, `{image_size}` (the same length
//! axis, for vision jobs), `{case}`, `{model}`; `{{` and `}}` are literal
//! braces. Every substituted value is shell-quoted by the collector, so a
//! placeholder must not sit inside quotes in the template (that would undo
//! the quoting); such templates are rejected.

use std::borrow::Cow;

/// A placeholder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Var {
    /// `{seq_len}`.
    SeqLen,
    /// `{batch}`.
    Batch,
    /// `{image_size}`.
    ImageSize,
    /// `{case}`.
    Case,
    /// `{model}`.
    Model,
}

const VARS: [(&str, Var); 5] = [
    ("seq_len", Var::SeqLen),
    ("batch", Var::Batch),
    ("image_size", Var::ImageSize),
    ("case", Var::Case),
    ("model", Var::Model),
];

const ALLOWED: &str = "{seq_len}, {batch}, {image_size}, {case}, {model}, {{ and }}";

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Lit(String),
    Var(Var),
}

/// A parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

/// Why a template was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{name}` that is not a placeholder.
    #[error("--cmd: unknown placeholder `{{{name}}}` at column {column}; allowed: {ALLOWED}")]
    Unknown {
        /// The name between the braces.
        name: String,
        /// 1-based column.
        column: usize,
    },
    /// A `{` without `}` or a lone `}`.
    #[error("--cmd: unbalanced `{brace}` at column {column}; write `{brace}{brace}` for a literal brace; allowed: {ALLOWED}")]
    Unbalanced {
        /// The brace.
        brace: char,
        /// 1-based column.
        column: usize,
    },
    /// A placeholder inside quotes.
    #[error("--cmd: placeholder `{{{name}}}` at column {column} is inside quotes; leave placeholders unquoted: the collector shell-quotes every substituted value itself")]
    Quoted {
        /// The placeholder name.
        name: String,
        /// 1-based column.
        column: usize,
    },
    /// The template is empty.
    #[error("--cmd: the command is empty; allowed: a shell command with placeholders {ALLOWED}")]
    Empty,
    /// A value cannot be quoted (a NUL byte).
    #[error("--cmd: the value of {{{0}}} contains a NUL byte and cannot be passed to the shell")]
    Unquotable(String),
}

/// The values of one sweep point.
#[derive(Clone, Debug, Default)]
pub struct Values<'a> {
    /// Tokens, residues or image edge.
    pub seq_len: u32,
    /// Batch.
    pub batch: u32,
    /// Case name.
    pub case: &'a str,
    /// Model id (empty without one).
    pub model: &'a str,
}

impl Template {
    /// Parses a template, rejecting unknown, unbalanced or quoted placeholders.
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        if text.trim().is_empty() {
            return Err(TemplateError::Empty);
        }
        let mut parts = Vec::new();
        let mut lit = String::new();
        let chars: Vec<char> = text.chars().collect();
        let mut quote: Option<char> = None;
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let column = i + 1;
            match c {
                '{' if chars.get(i + 1) == Some(&'{') => {
                    lit.push('{');
                    i += 2;
                    continue;
                }
                '}' if chars.get(i + 1) == Some(&'}') => {
                    lit.push('}');
                    i += 2;
                    continue;
                }
                '{' => {
                    let close = chars[i + 1..]
                        .iter()
                        .position(|&c| c == '}')
                        .ok_or(TemplateError::Unbalanced { brace: '{', column })?;
                    let name: String = chars[i + 1..i + 1 + close].iter().collect();
                    let var = VARS
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|&(_, v)| v)
                        .ok_or_else(|| TemplateError::Unknown {
                            name: name.clone(),
                            column,
                        })?;
                    if quote.is_some() {
                        return Err(TemplateError::Quoted { name, column });
                    }
                    if !lit.is_empty() {
                        parts.push(Part::Lit(std::mem::take(&mut lit)));
                    }
                    parts.push(Part::Var(var));
                    i += close + 2;
                    continue;
                }
                '}' => return Err(TemplateError::Unbalanced { brace: '}', column }),
                '\\' if quote != Some('\'') => {
                    // An escaped character (outside single quotes) is literal.
                    lit.push(c);
                    if let Some(&next) = chars.get(i + 1) {
                        lit.push(next);
                    }
                    i += 2;
                    continue;
                }
                '\'' | '"' => {
                    match quote {
                        None => quote = Some(c),
                        Some(q) if q == c => quote = None,
                        Some(_) => {}
                    }
                    lit.push(c);
                }
                _ => lit.push(c),
            }
            i += 1;
        }
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        Ok(Template { parts })
    }

    /// True when the template uses `var`.
    pub fn uses(&self, var: Var) -> bool {
        self.parts.contains(&Part::Var(var))
    }

    /// The shell command for one point, every value shell-quoted.
    pub fn render(&self, values: &Values) -> Result<String, TemplateError> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Lit(s) => out.push_str(s),
                Part::Var(v) => {
                    let (name, value): (&str, Cow<str>) = match v {
                        Var::SeqLen => ("seq_len", values.seq_len.to_string().into()),
                        Var::ImageSize => ("image_size", values.seq_len.to_string().into()),
                        Var::Batch => ("batch", values.batch.to_string().into()),
                        Var::Case => ("case", values.case.into()),
                        Var::Model => ("model", values.model.into()),
                    };
                    let quoted = shlex::try_quote(&value)
                        .map_err(|_| TemplateError::Unquotable(name.into()))?;
                    out.push_str(&quoted);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values<'a>(case: &'a str, model: &'a str) -> Values<'a> {
        Values {
            seq_len: 512,
            batch: 4,
            case,
            model,
        }
    }

    #[test]
    fn substitutes_and_quotes() {
        let t =
            Template::parse("python job.py --len {seq_len} --batch {batch} --name {case}").unwrap();
        assert_eq!(
            t.render(&values("a b; rm -rf ~", "m")).unwrap(),
            "python job.py --len 512 --batch 4 --name 'a b; rm -rf ~'"
        );
        assert!(t.uses(Var::SeqLen) && t.uses(Var::Batch) && !t.uses(Var::Model));
        let t = Template::parse("echo {model} {{literal}} $((1+1))").unwrap();
        assert_eq!(
            t.render(&values("c", "it's")).unwrap(),
            "echo \"it's\" {literal} $((1+1))"
        );
        assert_eq!(
            Template::parse("x {model}")
                .unwrap()
                .render(&values("c", ""))
                .unwrap(),
            "x ''"
        );
    }

    #[test]
    fn rejects_bad_templates_naming_the_problem() {
        let e = Template::parse("python j.py {len}").unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown placeholder `{len}` at column 13"),
            "{e}"
        );
        assert!(matches!(
            Template::parse("a {seq_len"),
            Err(TemplateError::Unbalanced { brace: '{', .. })
        ));
        assert!(matches!(
            Template::parse("a } b"),
            Err(TemplateError::Unbalanced { brace: '}', .. })
        ));
        let e = Template::parse("sh -c 'job --len {seq_len}'").unwrap_err();
        assert!(e.to_string().contains("inside quotes"), "{e}");
        assert!(matches!(
            Template::parse("echo \"{case}\""),
            Err(TemplateError::Quoted { .. })
        ));
        assert_eq!(Template::parse("  "), Err(TemplateError::Empty));
        // Quotes that close before the placeholder are fine; escaped quotes are literal.
        assert!(Template::parse("echo 'x' {seq_len} \\' {batch}").is_ok());
        assert!(Template::parse("a\u{0}")
            .unwrap()
            .render(&values("a\u{0}", ""))
            .is_ok());
        let t = Template::parse("x {case}").unwrap();
        assert_eq!(
            t.render(&values("a\u{0}", "")),
            Err(TemplateError::Unquotable("case".into()))
        );
    }
}
