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

/// `text` with every [`hidden`] character written as `\u{XXXX}`.
pub fn escape_hidden(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if hidden(c) {
            out.push_str(&format!("\\u{{{:04X}}}", c as u32));
        } else {
            out.push(c);
        }
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
    fn hidden_characters_are_written_out_where_they_stand() {
        assert_eq!(
            escape_hidden("echo \u{202E}gnp.exe\u{E0041}\u{E0042}"),
            "echo \\u{202E}gnp.exe\\u{E0041}\\u{E0042}"
        );
    }
}
