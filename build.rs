//! Builds the web UI (`web/dist`) when it is missing or older than its sources, so `cargo build`
//! yields a binary with the current UI.
//!
//! - `web/dist/index.html` newer than every source (`web/src`, `web/public`, `index.html`, the
//!   package and Vite files): nothing to do (fast path).
//! - Missing or stale, `npm` on PATH and `AGENTHOLD_SKIP_WEB_BUILD` unset: `npm ci` (when
//!   `web/node_modules` is missing) and `npm run build` in `web/`; a failure fails the build with
//!   the reason.
//! - Otherwise (no `npm`, or the skip variable set): a warning; a missing UI is then a page that
//!   says how to build it.
//!
//! `web/dist` itself is not watched: this script writes it, and a path written during the build
//! would make cargo run the script, and recompile the crate, again on the next build. Release
//! builds embed the files of `web/dist`, and the compiler tracks those itself.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

fn main() {
    for source in SOURCES {
        println!("cargo:rerun-if-changed=web/{source}");
    }
    println!("cargo:rerun-if-env-changed=AGENTHOLD_SKIP_WEB_BUILD");

    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let web = root.join("web");
    let built = modified(&web.join("dist").join("index.html"));
    let newest_source = SOURCES.iter().filter_map(|s| newest(&web.join(s))).max();
    if built.is_some() && newest_source <= built {
        return;
    }
    if !web.join("package.json").is_file() {
        println!("cargo:warning=web/package.json is missing: the server will serve a placeholder page instead of the web UI");
        return;
    }
    let state = if built.is_some() {
        "older than web/src"
    } else {
        "missing"
    };
    if env::var_os("AGENTHOLD_SKIP_WEB_BUILD").is_some_and(|v| !v.is_empty()) {
        println!("cargo:warning=AGENTHOLD_SKIP_WEB_BUILD is set and web/dist is {state}: the web UI is left as it is (build it with `npm --prefix web ci && npm --prefix web run build`)");
        return;
    }
    let Some(npm) = find_on_path(if cfg!(windows) { "npm.cmd" } else { "npm" }) else {
        println!("cargo:warning=npm is not on PATH and web/dist is {state}: the web UI is left as it is. Install Node.js 20.19+ and run `npm --prefix web ci && npm --prefix web run build`, then rebuild");
        return;
    };
    if !web.join("node_modules").is_dir() {
        run(&npm, &web, &["ci", "--no-audit", "--no-fund"]);
    }
    run(&npm, &web, &["run", "build"]);
    if !web.join("dist").join("index.html").is_file() {
        panic!("`npm run build` in web/ finished but web/dist/index.html is still missing");
    }
}

/// What the UI is built from, under `web/`.
const SOURCES: &[&str] = &[
    "src",
    "public",
    "index.html",
    "package.json",
    "package-lock.json",
    "vite.config.ts",
    "tsconfig.json",
];

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The newest modification time of `path` or anything below it.
fn newest(path: &Path) -> Option<SystemTime> {
    let own = modified(path);
    let Ok(entries) = std::fs::read_dir(path) else {
        return own;
    };
    entries
        .flatten()
        .filter_map(|e| newest(&e.path()))
        .chain(own)
        .max()
}

fn run(npm: &Path, dir: &Path, args: &[&str]) {
    let what = format!("npm {}", args.join(" "));
    // npm's output goes to stderr (cargo keeps it and shows it when this fails), never to stdout,
    // where cargo would read `cargo:` lines as instructions.
    let status = Command::new(npm)
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .unwrap_or_else(|e| panic!("could not run `{what}` in web/: {e}"));
    if !status.success() {
        panic!(
            "building the web UI failed: `{what}` in web/ exited with {status}. \
             Fix it (see its output above), or set AGENTHOLD_SKIP_WEB_BUILD=1 to build without the UI."
        );
    }
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}
