//! Markdown from a model rendered as HTML that can hold nothing active.
//!
//! Model text is untrusted. Raw HTML in it (blocks and inline tags) is
//! shown as text; a link keeps its destination only when it is `http`,
//! `https` or `mailto` (a `javascript:` or `data:` link becomes its plain
//! text); images are shown as their alt text and never loaded; terminal
//! escapes and other control characters are made visible first. What is
//! left is text, emphasis, code, lists, quotes, tables and headings, which
//! the renderer escapes.

use pulldown_cmark::{CowStr, Event, LinkType, Options, Parser, Tag, TagEnd};

/// The URL schemes a rendered link may keep.
const SAFE_SCHEMES: [&str; 3] = ["http://", "https://", "mailto:"];

/// Whether a link destination is safe to keep.
pub(crate) fn safe_destination(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    SAFE_SCHEMES.iter().any(|scheme| lower.starts_with(scheme))
}

/// `text` as HTML (see the module docs).
pub(crate) fn to_html(text: &str) -> String {
    let text = crate::sanitize::for_terminal(text);
    let mut options = Options::empty();
    options.insert(Options::ENABLE_TABLES);
    options.insert(Options::ENABLE_STRIKETHROUGH);
    let mut dropped_links = 0usize;
    let events = Parser::new_ext(&text, options).filter_map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Some(Event::Text(raw)),
        Event::Start(Tag::Link {
            dest_url, title, ..
        }) if safe_destination(&dest_url) => Some(Event::Start(Tag::Link {
            link_type: LinkType::Inline,
            dest_url,
            title,
            id: CowStr::Borrowed(""),
        })),
        Event::Start(Tag::Link { .. }) => {
            dropped_links += 1;
            None
        }
        Event::End(TagEnd::Link) if dropped_links > 0 => {
            dropped_links -= 1;
            None
        }
        // An image's alt text stays, as text; nothing is loaded.
        Event::Start(Tag::Image { .. }) | Event::End(TagEnd::Image) => None,
        other => Some(other),
    });
    let mut html = String::with_capacity(text.len() + text.len() / 4);
    pulldown_cmark::html::push_html(&mut html, events);
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_html_and_script_are_shown_as_text() {
        let html = to_html("hello <script>alert(1)</script>\n\n<img src=x onerror=alert(1)>");
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
    }

    #[test]
    fn only_web_and_mail_links_keep_their_destination() {
        let html =
            to_html("[ok](https://example.com) [bad](javascript:alert(1)) [b2]( JaVaScRiPt:x)");
        assert!(html.contains("href=\"https://example.com\""), "{html}");
        assert!(!html.to_ascii_lowercase().contains("javascript"), "{html}");
        assert!(html.contains("bad") && html.contains("b2"), "{html}");
        let image = to_html("![alt text](http://tracker.example/x.png)");
        assert!(
            !image.contains("<img") && image.contains("alt text"),
            "{image}"
        );
        let attribute = to_html("[x](https://e.com \"a\\\" onmouseover=\\\"alert(1)\")");
        assert!(!attribute.contains("\" onmouseover"), "{attribute}");
    }

    #[test]
    fn markdown_still_renders_and_escapes_are_made_visible() {
        let html = to_html("# Title\n\n*em* and `code <b>`\n\n\u{1b}[31mred\u{1b}[0m \u{7}");
        assert!(html.contains("<h1>Title</h1>"), "{html}");
        assert!(html.contains("<em>em</em>"), "{html}");
        assert!(html.contains("<code>code &lt;b&gt;</code>"), "{html}");
        assert!(
            !html.contains('\u{1b}') && !html.contains('\u{7}'),
            "{html:?}"
        );
    }
}
