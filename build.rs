//! Builds the web UI (`web/dist`) when it is missing, so `cargo build` yields a binary with the UI.
//!
//! - `web/dist/index.html` exists: nothing to do (fast path).
//! - Missing, `npm` on PATH and `AGENTHOLD_SKIP_WEB_BUILD` unset: `npm ci` (when `web/node_modules`
//!   is missing) and `npm run build` in `web/`; a failure fails the build with the reason.
//! - Missing and no `npm` (or the skip variable set): a warning; the server then serves a page that
//!   says how to build the UI.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn main() {
    println!("cargo:rerun-if-changed=web/dist");
    println!("cargo:rerun-if-changed=web/src");
    println!("cargo:rerun-if-changed=web/index.html");
    println!("cargo:rerun-if-changed=web/package.json");
    println!("cargo:rerun-if-changed=web/package-lock.json");
    println!("cargo:rerun-if-env-changed=AGENTHOLD_SKIP_WEB_BUILD");

    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let web = root.join("web");
    if web.join("dist").join("index.html").is_file() {
        return;
    }
    if !web.join("package.json").is_file() {
        println!("cargo:warning=web/package.json is missing: the server will serve a placeholder page instead of the web UI");
        return;
    }
    if env::var_os("AGENTHOLD_SKIP_WEB_BUILD").is_some_and(|v| !v.is_empty()) {
        println!("cargo:warning=AGENTHOLD_SKIP_WEB_BUILD is set and web/dist is missing: the web UI will be a placeholder page (build it with `npm --prefix web ci && npm --prefix web run build`)");
        return;
    }
    let Some(npm) = find_on_path(if cfg!(windows) { "npm.cmd" } else { "npm" }) else {
        println!("cargo:warning=npm is not on PATH and web/dist is missing: the web UI will be a placeholder page. Install Node.js 20.19+ and run `npm --prefix web ci && npm --prefix web run build`, then rebuild");
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
