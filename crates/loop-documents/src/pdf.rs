//! PDFs with lopdf: the text of each page, its streams inflated within a
//! bound.

use crate::{DocError, Document, MAX_PAGES};

/// What a page's content streams may inflate to.
const MAX_PAGE_INFLATED: usize = 64 * 1024 * 1024;

pub(crate) fn read(name: &str, bytes: &[u8]) -> Result<Document, DocError> {
    let doc = lopdf::Document::load_mem(bytes)
        .map_err(|e| DocError::new(format!("{name} is not a readable PDF: {e}")))?;
    if doc.is_encrypted() {
        return Err(DocError::new(format!(
            "{name} is encrypted: its text cannot be read"
        )));
    }
    let pages = doc.get_pages();
    if pages.len() > MAX_PAGES {
        return Err(DocError::new(format!(
            "{name} has {} pages, more than the {MAX_PAGES} a document read may have",
            pages.len()
        )));
    }
    let mut out = Vec::with_capacity(pages.len());
    for number in pages.keys() {
        let text = doc
            .extract_text_with_limit(&[*number], MAX_PAGE_INFLATED)
            .map_err(|e| DocError::new(format!("{name}: page {number} is unreadable: {e}")))?;
        out.push(text);
    }
    Ok(Document::Pdf { pages: out })
}
