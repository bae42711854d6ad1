//! What a person sees: the story of a task as it runs (`story`), the live
//! status line and Ctrl-C (`live`), questions on the terminal (`prompt`),
//! colour, glyphs and defanging (`screen`), and failures (`failure`).

pub(crate) mod failure;
pub(crate) mod live;
pub(crate) mod prompt;
pub(crate) mod screen;
pub(crate) mod story;
