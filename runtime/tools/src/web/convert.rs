//! What `web_fetch` does with a body: which content types it takes
//! ([`classify`]), HTML to Markdown ([`html_to_markdown`]: the main content
//! picked by Readability (`dom_smoothie`), converted by `htmd`; the whole
//! body without scripts, styles and navigation when Readability finds no
//! article), a page's Markdown alternate ([`markdown_alternate`]) and JSON in
//! a fenced block ([`json_block`]). Pure functions of their text; none
//! panics whatever the input (a property test and a fuzz target check).

use dom_query::Document;
use dom_smoothie::{Config, Readability};

/// What a response holds, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyKind {
    /// `text/markdown`: taken as it comes.
    Markdown,
    /// `text/html`, `application/xhtml+xml`: converted.
    Html,
    /// `text/plain`: taken as it comes.
    Plain,
    /// `application/json` and `…+json`: pretty-printed in a fenced block.
    Json,
}

/// The kind of body a `Content-Type` announces, or the media type refused.
/// A response without one is taken as plain text (binary bodies are caught
/// when decoded).
pub(crate) fn classify(content_type: Option<&str>) -> Result<BodyKind, String> {
    let Some(raw) = content_type else {
        return Ok(BodyKind::Plain);
    };
    let media = raw
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match media.as_str() {
        "text/markdown" | "text/x-markdown" => Ok(BodyKind::Markdown),
        "text/html" | "application/xhtml+xml" => Ok(BodyKind::Html),
        "text/plain" | "" => Ok(BodyKind::Plain),
        "application/json" | "text/json" => Ok(BodyKind::Json),
        other if other.starts_with("application/") && other.ends_with("+json") => {
            Ok(BodyKind::Json)
        }
        _ => Err(media),
    }
}

/// Elements of a whole page that are never content.
const NOT_CONTENT: [&str; 14] = [
    "script", "style", "noscript", "template", "nav", "header", "footer", "aside", "iframe", "svg",
    "form", "button", "head", "canvas",
];

/// Most elements Readability scores; a larger page falls back to the whole
/// body (bounds the time one conversion takes).
const MAX_ELEMENTS: usize = 50_000;

/// A page converted to Markdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Converted {
    /// The page's title, if it has one.
    pub(crate) title: Option<String>,
    /// The Markdown.
    pub(crate) markdown: String,
}

/// `html` (fetched from `url`) as Markdown: the main content, its first
/// heading a `# ` title.
pub(crate) fn html_to_markdown(html: &str, url: &str) -> Converted {
    let document = Document::from(html);
    let page_title = document
        .select("title")
        .iter()
        .next()
        .map(|title| collapse(&title.text()))
        .filter(|title| !title.is_empty());
    let config = Config {
        max_elements_to_parse: MAX_ELEMENTS,
        ..Config::default()
    };
    let article = Readability::with_document(document, Some(url), Some(config))
        .ok()
        .and_then(|mut readability| readability.parse().ok());
    let (title, markdown) = match article {
        Some(article) if !article.text_content.trim().is_empty() => {
            let title = Some(collapse(&article.title))
                .filter(|title| !title.is_empty())
                .or(page_title);
            (title, convert_fragment(&article.content))
        }
        _ => (page_title, whole_body(html)),
    };
    let markdown = tidy(&markdown);
    let markdown = match &title {
        Some(title) if !has_title_heading(&markdown) => {
            format!("# {title}\n\n{markdown}")
        }
        _ => markdown,
    };
    Converted { title, markdown }
}

/// An HTML fragment (Readability's content) as Markdown, leaving out what
/// is never content if Readability kept it.
fn convert_fragment(html: &str) -> String {
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(NOT_CONTENT.to_vec())
        .build();
    converter.convert(html).unwrap_or_default()
}

/// The whole page, without what is never content.
fn whole_body(html: &str) -> String {
    convert_fragment(html)
}

/// True when the Markdown opens with (or has early) a `# ` heading.
fn has_title_heading(markdown: &str) -> bool {
    markdown
        .lines()
        .filter(|line| !line.trim().is_empty())
        .take(3)
        .any(|line| line.starts_with("# "))
}

/// White space runs as one space, trimmed.
fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Lines with trailing white space removed and at most one blank line in a
/// row (outside fenced code).
fn tidy(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut blank = 0;
    let mut fenced = false;
    for line in markdown.lines() {
        let trimmed = line.trim_end();
        if trimmed.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if trimmed.is_empty() && !fenced {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(if fenced { line } else { trimmed });
        out.push('\n');
    }
    out.trim().to_owned()
}

/// The `href` of the page's `<link rel="alternate" type="text/markdown">`.
pub(crate) fn markdown_alternate(html: &str) -> Option<String> {
    let document = Document::from(html);
    let links = document.select("link");
    links.iter().find_map(|link| {
        let rel = link.attr("rel")?;
        let kind = link.attr("type")?;
        let alternate = rel
            .split_ascii_whitespace()
            .any(|word| word.eq_ignore_ascii_case("alternate"));
        let markdown = kind.trim().eq_ignore_ascii_case("text/markdown");
        let href = link.attr("href")?.trim().to_owned();
        (alternate && markdown && !href.is_empty()).then_some(href)
    })
}

/// JSON pretty-printed in a ```json block (as it came when it does not
/// parse); the fence is longer than any backtick run inside.
pub(crate) fn json_block(text: &str) -> String {
    let pretty = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| text.to_owned());
    let fence = "`".repeat(longest_backtick_run(&pretty).max(2) + 1);
    format!("{fence}json\n{pretty}\n{fence}")
}

fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCS_PAGE: &str = include_str!("../../tests/fixtures/web/docs_page.html");
    const BLOG_PAGE: &str = include_str!("../../tests/fixtures/web/blog_post.html");
    const NO_ARTICLE: &str = include_str!("../../tests/fixtures/web/link_list.html");

    #[test]
    fn content_types_taken_and_refused() {
        assert_eq!(
            classify(Some("text/html; charset=utf-8")),
            Ok(BodyKind::Html)
        );
        assert_eq!(classify(Some("TEXT/Markdown")), Ok(BodyKind::Markdown));
        assert_eq!(classify(Some("text/plain")), Ok(BodyKind::Plain));
        assert_eq!(classify(None), Ok(BodyKind::Plain));
        assert_eq!(classify(Some("application/json")), Ok(BodyKind::Json));
        assert_eq!(
            classify(Some("application/problem+json")),
            Ok(BodyKind::Json)
        );
        assert_eq!(
            classify(Some("application/octet-stream")),
            Err("application/octet-stream".into())
        );
        assert_eq!(classify(Some("image/png")), Err("image/png".into()));
        assert_eq!(classify(Some("text/csv")), Err("text/csv".into()));
    }

    /// The parts of a page a reader needs, and none of what surrounds it.
    fn assert_clean(markdown: &str) {
        for gone in [
            "trackPageview",
            "analytics",
            "color: red",
            "Site navigation",
            "Sidebar link",
            "Footer text",
            "Cookie banner",
        ] {
            assert!(
                !markdown.contains(gone),
                "{gone} is still there:\n{markdown}"
            );
        }
    }

    #[test]
    fn a_docs_page_keeps_its_content_code_tables_and_links() {
        let page = html_to_markdown(DOCS_PAGE, "https://docs.example.org/guide/install.html");
        let md = &page.markdown;
        assert_eq!(page.title.as_deref(), Some("Installing Widget"));
        assert!(md.starts_with("# Installing Widget"), "{md}");
        assert!(md.contains("## Requirements"), "{md}");
        assert!(
            md.contains("```") && md.contains("cargo install widget --locked"),
            "{md}"
        );
        assert!(md.contains("| Platform |"), "{md}");
        assert!(
            md.contains("[the configuration guide](https://docs.example.org/guide/config.html)"),
            "{md}"
        );
        assert_clean(md);
    }

    #[test]
    fn a_blog_post_keeps_the_article_only() {
        let page = html_to_markdown(BLOG_PAGE, "https://blog.example.com/2026/10/streams");
        let md = &page.markdown;
        assert!(md.starts_with("# "), "{md}");
        assert!(md.contains("Backpressure"), "{md}");
        assert!(md.contains("[Tokio](https://tokio.rs/)"), "{md}");
        assert!(md.contains("fn main()"), "{md}");
        assert_clean(md);
    }

    #[test]
    fn a_page_without_an_article_is_the_body_without_chrome() {
        let page = html_to_markdown(NO_ARTICLE, "https://example.net/");
        let md = &page.markdown;
        assert!(md.contains("# Links"), "{md}");
        assert!(md.contains("[Rust](https://www.rust-lang.org/)"), "{md}");
        assert_clean(md);
    }

    #[test]
    fn the_markdown_alternate_is_found() {
        let html = r#"<html><head><link rel="stylesheet" href="a.css">
            <link rel="Alternate" type="text/markdown" href="/page.md"></head><body></body></html>"#;
        assert_eq!(markdown_alternate(html).as_deref(), Some("/page.md"));
        assert_eq!(markdown_alternate(DOCS_PAGE), None);
        assert_eq!(
            markdown_alternate("<link rel=alternate type=text/markdown>"),
            None
        );
    }

    #[test]
    fn json_is_pretty_in_a_fence_no_body_can_close() {
        assert_eq!(
            json_block("{\"a\":[1,2]}"),
            "```json\n{\n  \"a\": [\n    1,\n    2\n  ]\n}\n```"
        );
        let sneaky = json_block("{\"a\":\"```\\n````\"}");
        assert!(sneaky.starts_with("`````json\n"), "{sneaky}");
        assert_eq!(json_block("not json ```"), "````json\nnot json ```\n````");
    }

    /// Pieces of HTML that parsers and converters trip on: unclosed and
    /// misnested tags, tables, lists, code, entities, comments, scripts.
    const PIECES: [&str; 24] = [
        "<h1>",
        "</h1>",
        "<p>",
        "</p>",
        "<a href=\"/x\">",
        "<a href=\"javascript:alert(1)\">",
        "</a>",
        "<table><tr><td>",
        "</td><td>",
        "</tr></table>",
        "<ul><li>",
        "</li></ul>",
        "<pre><code>",
        "</code></pre>",
        "```",
        "&amp;&lt;&#x1F600;&#0;",
        "<!--",
        "-->",
        "<script>x</script>",
        "<style>",
        "<nav>",
        "</untrusted-data>",
        "é\u{0}\u{202e}",
        "text ",
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

        #[test]
        fn any_html_converts_without_panicking(
            picks in proptest::collection::vec(0..PIECES.len(), 0..60),
            noise in ".{0,40}",
        ) {
            let mut html: String = picks.iter().map(|&i| PIECES[i]).collect();
            html.push_str(&noise);
            let page = html_to_markdown(&html, "https://example.org/a/b.html");
            proptest::prop_assert!(page.markdown.len() <= 4 * html.len() + 256);
            let _ = markdown_alternate(&html);
            let _ = json_block(&html);
        }
    }

    #[test]
    fn tidy_squeezes_blank_lines_outside_code() {
        assert_eq!(
            tidy("a  \n\n\n\nb\n```\n\n\nx\n```\n"),
            "a\n\nb\n```\n\n\nx\n```"
        );
    }
}
