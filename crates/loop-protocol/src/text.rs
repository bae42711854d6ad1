//! Characters that change what text seems to say without being seen.
//!
//! Text a model or a stranger wrote reaches people: a contract posted on
//! an issue, a story line on a terminal. A bidirectional override makes a
//! line read backwards, a zero-width joiner or a tag character hides words
//! a reviewer never sees, a variation selector or a Hangul filler makes
//! two names look alike. Every place that shows such text asks [`hidden`]
//! and writes those characters out as `\u{…}`, so what is seen is what is
//! there. The judgement is Unicode's, not a list picked by hand: every
//! format character (general category Cf: bidirectional controls,
//! zero-width characters, the byte-order mark, interlinear annotations,
//! tags, and whatever format character a later Unicode adds), every
//! default-ignorable code point (which renderers draw as nothing), and
//! the line and paragraph separators (a line break a reader cannot tell
//! from one). Control characters are each caller's to show its way.

use unicode_general_category::{GeneralCategory, get_general_category};

/// Whether `c` changes how text shows without showing itself.
pub fn hidden(c: char) -> bool {
    matches!(
        get_general_category(c),
        GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    ) || default_ignorable(c)
}

/// Unicode's Default_Ignorable_Code_Point beyond the format characters
/// (DerivedCoreProperties.txt): the combining grapheme joiner, Hangul
/// fillers, Khmer inherent vowels, variation selectors, and the ranges
/// kept ignorable for characters not assigned yet.
fn default_ignorable(c: char) -> bool {
    matches!(c,
        '\u{034F}'
        | '\u{115F}'..='\u{1160}'
        | '\u{17B4}'..='\u{17B5}'
        | '\u{180B}'..='\u{180F}'
        | '\u{2065}'
        | '\u{3164}'
        | '\u{FE00}'..='\u{FE0F}'
        | '\u{FFA0}'
        | '\u{FFF0}'..='\u{FFF8}'
        | '\u{E0000}'..='\u{E0FFF}')
}

/// Whether `c`, between `prev` and `next`, changes how text shows
/// without showing itself: [`hidden`], but for what honest writing needs
/// where it stands. A zero-width joiner or non-joiner between two
/// characters outside ASCII (Persian and Indic words, emoji sequences:
/// never inside an ASCII name that could be made to look like another),
/// and one emoji or text presentation selector after a visible character
/// (`❤️`; a run of selectors, which can carry hidden bytes, is written
/// out from its second).
pub fn hidden_between(prev: Option<char>, c: char, next: Option<char>) -> bool {
    if !hidden(c) {
        return false;
    }
    let shown =
        |x: Option<char>| x.is_some_and(|x| !hidden(x) && !x.is_whitespace() && !x.is_control());
    let wide = |x: Option<char>| shown(x) && x.is_some_and(|x| !x.is_ascii());
    match c {
        '\u{200C}' | '\u{200D}' => !(wide(prev) && wide(next)),
        '\u{FE0E}' | '\u{FE0F}' => !shown(prev),
        _ => true,
    }
}

/// `text` with every character [`hidden_between`] its neighbours written
/// as `\u{XXXX}`.
pub fn escape_hidden(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut prev = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if hidden_between(prev, c, chars.peek().copied()) {
            out.push_str(&format!("\\u{{{:04X}}}", c as u32));
        } else {
            out.push(c);
        }
        prev = Some(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_reader_cannot_see_is_hidden_and_what_they_can_is_not() {
        // Not on the old hand-picked lists: Arabic and Syriac format marks,
        // interlinear annotation, musical and shorthand format controls,
        // the tag characters that can spell whole hidden sentences, the
        // Hangul filler, variation selectors, the line separator.
        for c in [
            '\u{0600}',
            '\u{070F}',
            '\u{08E2}',
            '\u{110BD}',
            '\u{1BCA0}',
            '\u{1D173}',
            '\u{E0001}',
            '\u{E0041}',
            '\u{E007F}',
            '\u{3164}',
            '\u{FE0F}',
            '\u{E0100}',
            '\u{2028}',
            '\u{2029}',
            '\u{034F}',
            // And the ones every list had.
            '\u{202E}',
            '\u{2066}',
            '\u{200B}',
            '\u{200D}',
            '\u{FEFF}',
            '\u{00AD}',
        ] {
            assert!(hidden(c), "U+{:04X} should be hidden", c as u32);
        }
        // The honest twin: text in any script, emoji, combining accents and
        // ordinary spaces show as themselves.
        let honest = "Grüße, 日本語, עברית, العربية, हिन्दी, e\u{0301}, 👍🏽, a b\tc";
        assert!(!honest.chars().any(hidden), "{honest}");
        assert_eq!(escape_hidden(honest), honest);
    }

    #[test]
    fn joiners_and_presentation_selectors_stay_where_writing_needs_them() {
        // Persian (a non-joiner in a word), Devanagari and an emoji family
        // (joiners), a red heart and a warning sign (emoji presentation).
        for honest in [
            "می\u{200C}خواهم",
            "क्\u{200D}ष",
            "👨\u{200D}👩\u{200D}👧",
            "❤\u{FE0F} ⚠\u{FE0F} ok",
        ] {
            assert_eq!(escape_hidden(honest), honest);
        }
        // Inside an ASCII name, at an edge, beside a space, or a run of
        // selectors (bytes hidden one per selector): written out.
        assert_eq!(escape_hidden("pay\u{200C}pal"), "pay\\u{200C}pal");
        assert_eq!(escape_hidden("\u{200D}👍"), "\\u{200D}👍");
        assert_eq!(escape_hidden("👍\u{200D} x"), "👍\\u{200D} x");
        assert_eq!(escape_hidden(" \u{FE0F}"), " \\u{FE0F}");
        assert_eq!(
            escape_hidden("❤\u{FE0F}\u{FE0F}\u{FE01}"),
            "❤\u{FE0F}\\u{FE0F}\\u{FE01}"
        );
    }

    #[test]
    fn hidden_characters_are_written_out_where_they_stand() {
        assert_eq!(
            escape_hidden("echo \u{202E}gnp.exe\u{E0041}\u{E0042}"),
            "echo \\u{202E}gnp.exe\\u{E0041}\\u{E0042}"
        );
    }
}
