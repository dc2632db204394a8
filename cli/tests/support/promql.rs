//! The metric names a PromQL expression reads: what is left after removing strings, label
//! matchers, range selectors, function calls, keywords and grouping label lists.
//! Include with `#[path = "support/promql.rs"] mod promql;`.
#![allow(dead_code)]

const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
    "inf",
    "nan",
];

/// Metric names referenced by `expr`.
pub fn metric_names(expr: &str) -> Vec<String> {
    // Drop quoted strings, then {...} and [...] contents.
    let mut cleaned = String::new();
    let mut depth_brace = 0;
    let mut depth_bracket = 0;
    let mut quote: Option<char> = None;
    for c in expr.chars() {
        if let Some(q) = quote {
            if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' | '`' => quote = Some(c),
            '{' => depth_brace += 1,
            '}' => depth_brace -= 1,
            '[' => depth_bracket += 1,
            ']' => depth_bracket -= 1,
            _ if depth_brace > 0 || depth_bracket > 0 => {}
            _ => cleaned.push(c),
        }
        if matches!(c, '{' | '[') {
            cleaned.push(' ');
        }
    }
    let chars: Vec<char> = cleaned.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    let mut skip_group = false;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace()).copied();
            let lower = word.to_ascii_lowercase();
            if matches!(lower.as_str(), "by" | "without" | "on" | "ignoring" | "group_left" | "group_right") {
                skip_group = true;
            } else if next == Some('(') || KEYWORDS.contains(&lower.as_str()) {
                // a function call or an operator keyword
            } else {
                names.push(word);
            }
            continue;
        }
        if c == '(' && skip_group {
            // Skip the label list after by/without/on/ignoring/group_*.
            while i < chars.len() && chars[i] != ')' {
                i += 1;
            }
            skip_group = false;
        } else if c.is_ascii_digit() || c == '.' {
            // A number, with an exponent if any.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            continue;
        } else if c == '$' {
            while i + 1 < chars.len() && (chars[i + 1].is_ascii_alphanumeric() || chars[i + 1] == '_') {
                i += 1;
            }
        } else if !c.is_whitespace() {
            skip_group = false;
        }
        i += 1;
    }
    names
}

#[test]
fn reads_names_not_functions_labels_or_keywords() {
    let e = r#"histogram_quantile(0.99, sum by (le, stage) (rate(volley_x_bucket{job=~"$job"}[$__rate_interval]))) / clamp_min(sum(volley_players{a="b"}), 1) > on (job) volley_p"#;
    assert_eq!(metric_names(e), ["volley_x_bucket", "volley_players", "volley_p"]);
    assert_eq!(metric_names("max(time() - volley_t{j=\"x\"})"), ["volley_t"]);
    assert_eq!(metric_names("up == 0"), ["up"]);
}
