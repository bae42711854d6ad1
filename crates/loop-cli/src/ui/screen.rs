//! How the terminal is written to: whether stdout is a terminal that can
//! be redrawn (a live view), whether colours are wanted (`NO_COLOR`,
//! `CLICOLOR_FORCE`, `TERM=dumb`), and whether Unicode glyphs can be shown
//! (else ASCII stand-ins).

use anstyle::{AnsiColor, Style};
use std::io::IsTerminal;

/// What this process's stdout can show, decided once at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Screen {
    /// A terminal that can be redrawn: spinners and a status line.
    pub live: bool,
    /// Escape sequences for colour and style.
    pub color: bool,
    /// Unicode glyphs (else ASCII).
    pub unicode: bool,
}

/// A style for one kind of text.
#[derive(Debug, Clone, Copy)]
pub enum Tone {
    /// Something that passed.
    Good,
    /// Something that failed or was refused.
    Bad,
    /// Waiting on a person.
    Ask,
    /// Secondary text (a preview, the status line).
    Dim,
    /// A heading (a cycle, the end).
    Strong,
}

impl Screen {
    /// The screen stdout is, from the environment.
    pub fn of_stdout() -> Screen {
        let terminal = std::io::stdout().is_terminal();
        Screen::decide(terminal, &|k| std::env::var_os(k))
    }

    /// The decision, from whether stdout is a terminal and the environment.
    pub fn decide(terminal: bool, env: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> Screen {
        let set = |k: &str| env(k).is_some_and(|v| !v.is_empty());
        let value = |k: &str| env(k).map(|v| v.to_string_lossy().into_owned());
        let dumb = value("TERM").as_deref() == Some("dumb");
        // https://no-color.org: any non-empty NO_COLOR turns colour off;
        // CLICOLOR_FORCE turns it on even when piped; CLICOLOR=0 off.
        let color = if set("NO_COLOR") {
            false
        } else if value("CLICOLOR_FORCE").is_some_and(|v| !v.is_empty() && v != "0") {
            true
        } else {
            terminal && !dumb && value("CLICOLOR").as_deref() != Some("0")
        };
        // The locale in effect (LC_ALL, else LC_CTYPE, else LANG): one that
        // is set and is not UTF-8 cannot show the glyphs.
        let locale = ["LC_ALL", "LC_CTYPE", "LANG"]
            .iter()
            .find_map(|k| value(k).filter(|v| !v.is_empty()));
        let utf8 = locale.is_none_or(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("utf-8") || l.contains("utf8")
        });
        let ascii = set("LOOP_ASCII") || dumb || !utf8;
        Screen {
            live: terminal && !dumb,
            color,
            unicode: !ascii,
        }
    }

    /// `text` in `tone`, when colour is on.
    pub fn paint(&self, tone: Tone, text: &str) -> String {
        if !self.color || text.is_empty() {
            return text.to_string();
        }
        let style = match tone {
            Tone::Good => Style::new().fg_color(Some(AnsiColor::Green.into())),
            Tone::Bad => Style::new().fg_color(Some(AnsiColor::Red.into())),
            Tone::Ask => Style::new().fg_color(Some(AnsiColor::Yellow.into())).bold(),
            Tone::Dim => Style::new().dimmed(),
            Tone::Strong => Style::new().bold(),
        };
        format!("{style}{text}{style:#}")
    }

    /// `text` as this screen shows it: glyphs in ASCII where Unicode
    /// cannot be shown.
    pub fn glyphs(&self, text: &str) -> String {
        if self.unicode {
            return text.to_string();
        }
        ascii(text)
    }

    /// A narrated line or block, coloured by its marks, in this screen's
    /// glyphs.
    pub fn render(&self, text: &str) -> String {
        let text = &defang(text);
        // On a terminal, lines fit its width (read now: it may have been
        // resized), broken between words under their own indent.
        let fitted;
        let text = if self.live {
            fitted = fit(text, terminal_width(), !self.unicode);
            &fitted
        } else {
            text
        };
        let text = if self.color {
            text.split_inclusive('\n')
                .map(|line| self.tint_line(line))
                .collect()
        } else {
            text.to_string()
        };
        self.glyphs(&text)
    }

    /// One narrated line with its mark coloured: ✓ green, ✗ and ⛔ red, ⏸
    /// yellow, headings bold.
    fn tint_line(&self, line: &str) -> String {
        let marks: [(&str, Tone); 6] = [
            ("✓", Tone::Good),
            ("✗", Tone::Bad),
            ("⛔", Tone::Bad),
            ("⏸", Tone::Ask),
            ("■", Tone::Strong),
            ("▶", Tone::Strong),
        ];
        if line.starts_with("cycle ") {
            let body = line.trim_end_matches('\n');
            let nl = &line[body.len()..];
            return match body.split_once(" · ") {
                Some((head, rest)) => format!(
                    "{} · {}{nl}",
                    self.paint(Tone::Strong, head),
                    self.paint(Tone::Dim, rest)
                ),
                None => format!("{}{nl}", self.paint(Tone::Strong, body)),
            };
        }
        for (mark, tone) in marks {
            if let Some(at) = line.find(mark) {
                let (before, after) = line.split_at(at);
                let rest = &after[mark.len()..];
                return format!("{before}{}{rest}", self.paint(tone, mark));
            }
        }
        line.to_string()
    }
}

/// The terminal's width in columns (80 when unknown).
pub fn terminal_width() -> usize {
    // SAFETY: TIOCGWINSZ fills a winsize; a failure leaves it zeroed.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 {
        usize::from(ws.ws_col)
    } else {
        80
    }
}

/// Columns `s` takes on a terminal.
fn columns(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

/// Columns `s` takes as a screen shows it: with `ascii`, its glyphs as
/// their ASCII stand-ins (`✗` is `FAIL`).
fn measure(s: &str, ascii_only: bool) -> usize {
    if ascii_only {
        columns(&ascii(s))
    } else {
        columns(s)
    }
}

/// `text` with every line at most `width` columns (`ascii`: as its
/// glyphs' ASCII stand-ins take them): a longer line breaks
/// between words, its continuations indented under its first word after
/// the indent and mark (`  ✓ `, `    → `); a word longer than a line is
/// cut where the line ends.
pub fn fit(text: &str, width: usize, ascii: bool) -> String {
    let width = width.max(20);
    let mut out = String::with_capacity(text.len() + 16);
    for line in text.split_inclusive('\n') {
        let body = line.strip_suffix('\n').unwrap_or(line);
        if measure(body, ascii) <= width {
            out.push_str(line);
            continue;
        }
        fit_line(body, (width, ascii), &mut out);
        if line.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// One line too wide for `width`, broken into `out`.
fn fit_line(body: &str, (width, ascii): (usize, bool), out: &mut String) {
    let columns = |s: &str| measure(s, ascii);
    let lead = body.len() - body.trim_start_matches(' ').len();
    // A mark (a glyph or two, then a space) belongs to the first line;
    // so does a label in a column (`next    …`): the rest hangs under
    // what follows it.
    let rest = &body[lead..];
    let mark = match rest.split_once(' ') {
        Some((m, _))
            if !m.is_empty() && columns(m) <= 2 && !m.chars().any(char::is_alphanumeric) =>
        {
            m.len() + 1
        }
        Some((label, after))
            if !label.is_empty() && label.len() <= 14 && after.starts_with(' ') =>
        {
            rest.len() - after.trim_start_matches(' ').len()
        }
        _ => 0,
    };
    let head = &body[..lead + mark];
    let hang = columns(head).min(width / 2);
    let start = out.len();
    out.push_str(head);
    let mut used = columns(head);
    // Nothing but the indent on this line yet.
    let mut fresh = true;
    let break_line = |out: &mut String, used: &mut usize, fresh: &mut bool| {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', hang));
        *used = hang;
        *fresh = true;
    };
    for word in body[lead + mark..].split(' ') {
        let mut word = word;
        loop {
            let sep = usize::from(!fresh);
            if used + sep + columns(word) <= width {
                if !fresh {
                    out.push(' ');
                }
                out.push_str(word);
                used += sep + columns(word);
                fresh = false;
                break;
            }
            if !fresh {
                break_line(out, &mut used, &mut fresh);
                continue;
            }
            // A word wider than a line: cut where the line ends (one
            // character at least).
            let mut cut = 0;
            let mut cols = used;
            for (i, c) in word.char_indices() {
                cols += measure(c.encode_utf8(&mut [0; 4]), ascii);
                if cols > width && cut > 0 {
                    break;
                }
                cut = i + c.len_utf8();
            }
            out.push_str(&word[..cut]);
            word = &word[cut..];
            if word.is_empty() {
                used = width;
                fresh = false;
                break;
            }
            break_line(out, &mut used, &mut fresh);
        }
    }
    // (No line ends in the spaces of an indent.)
    let kept = out[start..].trim_end_matches(' ').len();
    out.truncate(start + kept);
}

/// `text` safe to write to a terminal: what a model or a command wrote can
/// hold escape sequences (retitling the window, moving the cursor, hiding
/// text) and tabs the terminal widens; tabs become spaces and every other
/// control character but the newline is shown as `^X` or `\u{..}`.
pub fn defang(text: &str) -> String {
    use loop_protocol::text::{hidden, hidden_between};
    if !text
        .chars()
        .any(|c| (c.is_control() && c != '\n') || hidden(c))
    {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut prev = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => out.push('\n'),
            '\t' => out.push_str("    "),
            c if (c as u32) < 0x20 => {
                out.push('^');
                out.push(char::from(b'@' + c as u8));
            }
            c if c.is_control() || hidden_between(prev, c, chars.peek().copied()) => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32))
            }
            c => out.push(c),
        }
        prev = Some(c);
    }
    out
}

/// The ASCII stand-in of every glyph the narration uses.
pub fn ascii(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '✓' => out.push_str("ok"),
            '✗' => out.push_str("FAIL"),
            '⛔' => out.push_str("REFUSED"),
            '▶' => out.push('>'),
            '■' => out.push('#'),
            '⧗' => out.push('~'),
            '↩' => out.push_str("<-"),
            '↻' => out.push('@'),
            '⏸' => out.push_str("||"),
            '⚖' => out.push('='),
            '→' => out.push_str("->"),
            '＋' => out.push('+'),
            '│' => out.push('|'),
            '…' => out.push_str("..."),
            '·' => out.push('-'),
            '—' => out.push_str("--"),
            c if c.is_ascii() => out.push(c),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn with(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn long_lines_fit_the_width_under_their_own_indent() {
        let line =
            "    ✗ tests exit 1 · the assertion that failed says the totals differ by one cent\n";
        let out = fit(line, 40, false);
        for l in out.lines() {
            assert!(columns(l) <= 40, "{l:?} in {out:?}");
        }
        assert_eq!(
            out,
            "    ✗ tests exit 1 · the assertion that\n      failed says the totals differ by\n      one cent\n"
        );
        // Words are whole: joined again, the text is what it was.
        let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(words(&out), words(line));
        // A short line is left alone; a word wider than a line is cut.
        assert_eq!(fit("  ✓ ok\n", 40, false), "  ✓ ok\n");
        let path = format!("  → read_file {}", "a/".repeat(30));
        let out = fit(&path, 30, false);
        assert!(out.lines().all(|l| columns(l) <= 30), "{out}");
        assert_eq!(out.replace(['\n', ' '], ""), path.replace(' ', ""));
        // A label in a column: the rest hangs under its text.
        assert_eq!(
            fit(
                "next    `loop diff t-1` shows it; `loop apply t-1` puts it in",
                40,
                false
            ),
            "next    `loop diff t-1` shows it; `loop\n        apply t-1` puts it in"
        );
        // Wide characters count as the two columns they take.
        let wide = fit(&format!("  {}", "字".repeat(30)), 21, false);
        assert!(wide.lines().all(|l| columns(l) <= 21), "{wide}");
        // In ASCII, glyphs are measured as their stand-ins (`✗` is `FAIL`).
        let marks = "  ✗ ✗ ✗ ✗ ✗ ✗ ✗ ✗ ✗ ✗ ✗ ✗ ✗ ✗ ✗ ✗ ✗ ✗ … … … …";
        let out = ascii(&fit(marks, 30, true));
        assert!(out.lines().all(|l| l.len() <= 30), "{out}");
    }

    #[test]
    fn the_conventions_decide_colour_and_glyphs() {
        let s = Screen::decide(true, &with(&[("TERM", "xterm"), ("LANG", "C.UTF-8")]));
        assert_eq!(
            s,
            Screen {
                live: true,
                color: true,
                unicode: true
            }
        );
        assert!(!Screen::decide(true, &with(&[("NO_COLOR", "1")])).color);
        // NO_COLOR wins over CLICOLOR_FORCE.
        let both = with(&[("NO_COLOR", "1"), ("CLICOLOR_FORCE", "1")]);
        assert!(!Screen::decide(true, &both).color);
        assert!(Screen::decide(false, &with(&[("CLICOLOR_FORCE", "1")])).color);
        assert!(!Screen::decide(false, &with(&[])).color);
        assert!(!Screen::decide(false, &with(&[])).live);
        let dumb = Screen::decide(true, &with(&[("TERM", "dumb")]));
        assert!(!dumb.color && !dumb.live && !dumb.unicode);
        assert!(!Screen::decide(true, &with(&[("LANG", "C")])).unicode);
        // LC_ALL overrides LANG.
        let lc = with(&[("LC_ALL", "POSIX"), ("LANG", "en_US.UTF-8")]);
        assert!(!Screen::decide(true, &lc).unicode);
        assert!(!Screen::decide(true, &with(&[("LOOP_ASCII", "1")])).unicode);
    }

    #[test]
    fn without_colour_nothing_is_escaped_and_ascii_has_no_glyphs() {
        let plain = Screen {
            live: false,
            color: false,
            unicode: false,
        };
        let out = plain.render("  → run_command `pytest` ✓ exit 0 · 12 ms\n■ verified …\n");
        assert!(out.is_ascii(), "{out}");
        assert!(!out.contains('\x1b'));
        assert_eq!(
            out,
            "  -> run_command `pytest` ok exit 0 - 12 ms\n# verified ...\n"
        );
        // What a model or a command wrote never reaches the terminal as an
        // escape sequence, coloured or not.
        let hostile = "  → read_file x ✓ \x1b]0;owned\x07\x1b[2J\tgone\u{9b}31m\n";
        for screen in [
            plain,
            Screen {
                live: true,
                color: true,
                unicode: true,
            },
        ] {
            let out = screen.render(hostile);
            // Only the tint of the ✓ is an escape sequence (two of them).
            let escapes = out.matches('\x1b').count();
            assert_eq!(escapes, if screen.color { 2 } else { 0 }, "{out:?}");
            assert!(!out.contains('\x07') && !out.contains('\t') && !out.contains('\u{9b}'));
            assert!(
                out.contains("^[]0;owned^G^[[2J    gone\\u{9b}31m"),
                "{out:?}"
            );
        }
        // A line that would read backwards, or hide a character, shows it.
        assert_eq!(defang("ok\u{202e}txt.exe"), "ok\\u{202e}txt.exe");
        assert_eq!(defang("a\u{200b}b"), "a\\u{200b}b");
        // Tag characters and variation selectors carry hidden words.
        assert_eq!(defang("ok\u{e0041}\u{fe01}"), "ok\\u{e0041}\\u{fe01}");
        // The honest twin: any script shows as itself.
        assert_eq!(defang("Grüße 日本語 עברית"), "Grüße 日本語 עברית");
        let colour = Screen {
            live: true,
            color: true,
            unicode: true,
        };
        let out = colour.render("    ✗ tests exit 1\n");
        assert!(out.contains("\x1b[31m✗\x1b[0m"), "{out:?}");
    }
}
