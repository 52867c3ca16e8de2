//! What an agent may be: the rules of its settings and how a request becomes one, apart from
//! any way of asking. The API, the config's presets, and whatever else makes agents use these
//! rules rather than keep their own.
//!
//! [`spec`] checks each setting and merges a request with its preset and the server's
//! [`defaults`], [`env`](mod@env) holds the rules of an agent's variables, [`preset`] the
//! templates agents are made from, [`runtimes`] the container runtimes agents may ask for, and
//! [`labels`] the rules of an agent's labels and the filter of a listing, [`grants`] those of the
//! secrets granted to it.

pub mod defaults;
pub mod env;
pub mod grants;
pub mod labels;
pub mod preset;
pub mod runtimes;
pub mod spec;
