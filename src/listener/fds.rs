//! The process's file-handle budget: raising `RLIMIT_NOFILE` and fitting the listeners' caps
//! under it.

/// File handles kept beyond both listeners' caps: the database, the Docker socket, files
/// streamed to and from sandboxes, the fake driver's own ends of its tunnel connections.
pub const FD_RESERVE: u64 = 512;
/// Linux's default `fs.nr_open`: the most a soft limit can be when the hard one is unlimited.
const NR_OPEN_DEFAULT: u64 = 1 << 20;

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit, so the listeners' caps, not
/// the default soft limit (often 1024), decide how many connections are held. Returns the soft
/// limit in force afterwards.
pub fn raise_nofile_limit() -> Result<u64, nix::Error> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    // Linux refuses an unlimited soft limit for open files: nr_open is the real ceiling.
    let target = if hard == RLIM_INFINITY {
        NR_OPEN_DEFAULT
    } else {
        hard
    };
    if soft >= target {
        return Ok(soft);
    }
    setrlimit(Resource::RLIMIT_NOFILE, target, hard)?;
    Ok(target)
}

/// File-handle counts wanted by each listener (the API's and the tunnel's connections, the
/// egress proxy's two handles per connection), shrunk in proportion when together with
/// [`FD_RESERVE`] they would pass `nofile`: past it accepts fail with EMFILE for every
/// listener alike, and the server cannot open its own files either.
pub fn fit_to_budget<const N: usize>(nofile: u64, wanted: [usize; N]) -> [usize; N] {
    let total: u64 = wanted.iter().map(|&n| n as u64).sum();
    let budget = nofile.saturating_sub(FD_RESERVE);
    if total <= budget {
        return wanted;
    }
    wanted.map(|n| ((n as u64 * budget / total) as usize).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_keeps_the_reserve() {
        assert_eq!(fit_to_budget(1 << 20, [4096, 2048]), [4096, 2048]);
        let [api, tunnel] = fit_to_budget(1024, [4096, 2048]);
        assert!(api + tunnel <= (1024 - FD_RESERVE) as usize);
        assert_eq!((api, tunnel), (341, 170));
        assert_eq!(fit_to_budget(10, [4096, 2048]), [1, 1]);
        let [_, _, egress] = fit_to_budget(1024, [4096, 2048, 2048]);
        assert_eq!(egress, 128);
    }

    #[test]
    fn nofile_soft_limit_is_raised_to_the_hard_one() {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        // Start from a low soft limit, as many init systems give, so there is something to raise.
        setrlimit(Resource::RLIMIT_NOFILE, 1024.min(hard), hard).unwrap();
        let now = raise_nofile_limit().unwrap();
        let (soft, hard_after) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(hard_after, hard, "the hard limit is left alone");
        assert_eq!(soft, now);
        assert!(soft == hard || (soft == NR_OPEN_DEFAULT && hard > soft));
        assert_eq!(
            raise_nofile_limit().unwrap(),
            soft,
            "raising twice changes nothing"
        );
    }
}
