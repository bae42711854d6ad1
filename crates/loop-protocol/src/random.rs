//! Random bytes from the operating system, failing loudly: task ids,
//! claim tokens and scratch names must never quietly become all zeros.

/// The system's random source could not be read.
#[derive(Debug, thiserror::Error)]
#[error("the system's random source failed: {0}")]
pub struct RandomError(String);

/// `N` random bytes from the OS (`getrandom(2)`).
pub fn bytes<const N: usize>() -> Result<[u8; N], RandomError> {
    let mut b = [0u8; N];
    getrandom::getrandom(&mut b).map_err(|e| RandomError(e.to_string()))?;
    Ok(b)
}

/// `N` random bytes as lowercase hex.
pub fn hex<const N: usize>() -> Result<String, RandomError> {
    bytes::<N>().map(|b| crate::hash::hex(&b))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    #[test]
    fn two_draws_differ_and_are_not_zero() {
        let a = super::bytes::<16>().unwrap();
        let b = super::bytes::<16>().unwrap();
        assert_ne!(a, b);
        assert_ne!(a, [0u8; 16]);
        assert_eq!(super::hex::<8>().unwrap().len(), 16);
    }
}
