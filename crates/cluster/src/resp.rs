//! Settings of the nodes' Redis-protocol front end: the `[resp]` table of the file.

use std::fmt;

use crate::error::ConfigError;

/// Default of [`RespSettings::max_request_bytes`]: 64 MiB. A ferrotx value is at most
/// 1 MiB, so no single-key command needs more; the rest is room for MSET and MGET of
/// many keys, while one client still cannot make its node buffer without bound.
pub const RESP_REQUEST_BYTES_MAX_DEFAULT: usize = 64 << 20;

/// Default of [`RespSettings::max_clients`]: Redis's `maxclients` default (10,000). An
/// idle connection costs a socket and a few hundred bytes, so the limit is there to keep
/// a node within its file descriptors, not its memory.
pub const RESP_CLIENTS_MAX_DEFAULT: usize = 10_000;

/// Default of [`RespSettings::pipeline_commands_max`], the Redis layer's own default
/// (`ferrotx_resp::session::PIPELINE_COMMANDS_MAX_DEFAULT`): enough for the pipelines
/// clients send, small enough that one conflict retries little work.
pub const RESP_PIPELINE_COMMANDS_MAX_DEFAULT: usize = 64;

/// Default of [`RespSettings::command_timeout_ms`]: 5 s, a few leases and recoveries.
pub const RESP_COMMAND_TIMEOUT_MS_DEFAULT: u64 = 5_000;

/// How every node of the cluster serves Redis clients (each on its member's `resp`
/// address or `resp_port`, if it has one).
#[derive(Clone, PartialEq, Eq)]
pub struct RespSettings {
    /// The password of Redis's `default` user: when set, clients must send AUTH (or
    /// HELLO AUTH) before anything else. `None`: no password.
    pub requirepass: Option<String>,
    /// Largest request a client may send, in bytes (its arguments added up): a longer one
    /// is a protocol error that closes the connection.
    pub max_request_bytes: usize,
    /// Most clients connected to one node at once; the next one is answered "max number
    /// of clients reached" and closed, as Redis does.
    pub max_clients: usize,
    /// Most data commands a client pipelines (sends before reading the replies) that run
    /// as one transaction; 1 runs every command as a transaction of its own.
    pub pipeline_commands_max: usize,
    /// Longest a command runs before it answers: its result, `-TRYAGAIN` /
    /// `-CLUSTERDOWN` (nothing changed), or "outcome unknown" (a failure interrupted its
    /// commit and recovery did not decide it in time).
    pub command_timeout_ms: u64,
}

impl Default for RespSettings {
    fn default() -> Self {
        Self {
            requirepass: None,
            max_request_bytes: RESP_REQUEST_BYTES_MAX_DEFAULT,
            max_clients: RESP_CLIENTS_MAX_DEFAULT,
            pipeline_commands_max: RESP_PIPELINE_COMMANDS_MAX_DEFAULT,
            command_timeout_ms: RESP_COMMAND_TIMEOUT_MS_DEFAULT,
        }
    }
}

/// The password is never printed (configurations are logged and put in panics).
impl fmt::Debug for RespSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RespSettings")
            .field(
                "requirepass",
                &self.requirepass.as_ref().map(|_| "<redacted>"),
            )
            .field("max_request_bytes", &self.max_request_bytes)
            .field("max_clients", &self.max_clients)
            .field("pipeline_commands_max", &self.pipeline_commands_max)
            .field("command_timeout_ms", &self.command_timeout_ms)
            .finish()
    }
}

impl RespSettings {
    /// Checks the settings: limits above zero, a password that is not empty.
    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        if self.max_request_bytes == 0 {
            return Err(ConfigError::RespLimitZero {
                setting: "max_request_bytes",
            });
        }
        if self.command_timeout_ms == 0 {
            return Err(ConfigError::RespLimitZero {
                setting: "command_timeout_ms",
            });
        }
        if self.max_clients == 0 {
            return Err(ConfigError::RespLimitZero {
                setting: "max_clients",
            });
        }
        if self.pipeline_commands_max == 0 {
            return Err(ConfigError::RespLimitZero {
                setting: "pipeline_commands_max",
            });
        }
        if self.requirepass.as_deref() == Some("") {
            return Err(ConfigError::EmptyRequirePass);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_bad_settings_name_the_setting() {
        RespSettings::default().check().unwrap();
        let zero_bytes = RespSettings {
            max_request_bytes: 0,
            ..RespSettings::default()
        };
        let error = zero_bytes.check().unwrap_err();
        assert!(error.to_string().contains("max_request_bytes"), "{error}");
        let zero_clients = RespSettings {
            max_clients: 0,
            ..RespSettings::default()
        };
        assert!(matches!(
            zero_clients.check(),
            Err(ConfigError::RespLimitZero {
                setting: "max_clients"
            })
        ));
        let empty = RespSettings {
            requirepass: Some(String::new()),
            ..RespSettings::default()
        };
        assert!(matches!(empty.check(), Err(ConfigError::EmptyRequirePass)));
    }

    #[test]
    fn debug_output_hides_the_password() {
        let settings = RespSettings {
            requirepass: Some("hunter2".to_owned()),
            ..RespSettings::default()
        };
        let text = format!("{settings:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("redacted"), "{text}");
    }
}
