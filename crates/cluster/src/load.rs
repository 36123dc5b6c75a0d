//! Reading a configuration file: the one function of this crate that does I/O.

use std::path::Path;

use crate::configuration::Configuration;
use crate::error::ConfigError;

impl Configuration {
    /// Reads and checks the TOML configuration file at `path`
    /// (see [`Configuration::from_toml_str`]).
    ///
    /// This is the crate's only I/O, kept apart so that everything else runs unchanged in
    /// the simulator; callers that have the text already use `from_toml_str`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        // The sans-IO ban on file reads (lints/sans-io.clippy.toml) has this one exception.
        #[allow(
            clippy::disallowed_methods,
            reason = "the one file read of the protocol crates: loading a configuration"
        )]
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml_str(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_the_example_file() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/example.toml");
        let config = Configuration::load(&path).unwrap();
        assert_eq!(
            config,
            Configuration::from_toml_str(include_str!("../config/example.toml")).unwrap()
        );
    }

    #[test]
    fn a_missing_file_names_the_path() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/no-such-file.toml");
        let error = Configuration::load(&path).unwrap_err();
        assert!(matches!(&error, ConfigError::Read { path: p, .. } if *p == path));
        assert!(error.to_string().contains("no-such-file.toml"), "{error}");
    }
}
