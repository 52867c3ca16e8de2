//! The embedded web UI: the files of `web/dist` (built by `npm --prefix web ci && npm --prefix web
//! run build`, or by `build.rs`) compiled into the binary and served at `/`.
//!
//! - `/` and every unknown path outside `/api/` answer `index.html` (the UI routes in the browser),
//!   with `Cache-Control: no-cache` so a new release is picked up at once.
//! - `/assets/…` are content-hashed by Vite: cached for a year, `immutable`; a missing one is `404`.
//! - `/api/…` never falls back to the UI: an unknown API path gets the API's JSON `404`.
//! - Without a built UI, `/` is a short page that says how to build it.
//!
//! In debug builds rust-embed reads `web/dist` from disk at run time, so a UI rebuild needs no
//! recompile; release builds carry the files inside the binary.
//!
//! [`router`] only has a fallback: merge it into the API router (`api.merge(web::router())`), or
//! use it as that router's `fallback_service`.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use rust_embed::RustEmbed;

#[derive(RustEmbed)]
#[folder = "web/dist"]
#[allow_missing = true]
struct Assets;

/// Content-Security-Policy of the UI page: scripts and connections (fetch, SSE, WebSocket) to this
/// origin only. Inline styles are allowed because xterm.js sets them.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
    img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; object-src 'none'; \
    base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const IMMUTABLE: &str = "public, max-age=31536000, immutable";

const PLACEHOLDER: &str = "<!doctype html>
<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"color-scheme\" content=\"light dark\">
<title>agenthold</title>
<style>body{font-family:system-ui,sans-serif;max-width:40rem;margin:4rem auto;padding:0 1rem;line-height:1.5}
code{font-size:0.95em}</style></head>
<body><h1>agenthold</h1>
<p>The API is running, but this binary was built without the web UI.</p>
<p>Build the UI, then rebuild the server:</p>
<pre><code>npm --prefix web ci &amp;&amp; npm --prefix web run build
cargo build --release</code></pre>
<p>The HTTP API is at <a href=\"/api/v1/health\"><code>/api/v1/health</code></a> and described at
<a href=\"/api/v1/openapi.json\"><code>/api/v1/openapi.json</code></a>.</p>
</body></html>
";

/// The web UI's router. Generic over the state so it merges into a router of any state.
pub fn router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    Router::new().fallback(serve)
}

/// Answer one request for the UI.
pub async fn serve(method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let path = uri.path();
    if path == "/api" || path.starts_with("/api/") {
        return api_not_found();
    }
    if method != Method::GET && method != Method::HEAD {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, HeaderValue::from_static("GET, HEAD"))],
            "method not allowed\n",
        )
            .into_response();
    }
    let rel = path.trim_start_matches('/');
    let safe = !rel.split('/').any(|seg| seg == ".." || seg == ".") && !rel.contains('\\');
    if safe && !rel.is_empty() && rel != "index.html" {
        if let Some(file) = Assets::get(rel) {
            let cache = if rel.starts_with("assets/") {
                IMMUTABLE
            } else {
                "no-cache"
            };
            // The build writes `name.gz` beside scripts and styles: send it when gzip is accepted.
            if accepts_gzip(&headers) {
                if let Some(gz) = Assets::get(&format!("{rel}.gz")) {
                    let mut res = file_response(&gz, cache, &headers, false);
                    let h = res.headers_mut();
                    if let Ok(v) = HeaderValue::from_str(&content_type(&file)) {
                        h.insert(header::CONTENT_TYPE, v);
                    }
                    h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
                    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
                    return res;
                }
            }
            let mut res = file_response(&file, cache, &headers, false);
            if Assets::get(&format!("{rel}.gz")).is_some() {
                res.headers_mut()
                    .insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
            }
            return res;
        }
    }
    if rel.starts_with("assets/") {
        return (
            StatusCode::NOT_FOUND,
            [(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"))],
            "not found\n",
        )
            .into_response();
    }
    match Assets::get("index.html") {
        Some(file) => file_response(&file, "no-cache", &headers, true),
        None => page(Body::from(PLACEHOLDER), None),
    }
}

fn file_response(
    file: &rust_embed::EmbeddedFile,
    cache: &'static str,
    req: &HeaderMap,
    is_page: bool,
) -> Response {
    let etag = format!("\"{}\"", hex::encode(&file.metadata.sha256_hash()[..16]));
    let fresh = req
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    if is_page {
        let mut res = page(
            if fresh {
                Body::empty()
            } else {
                Body::from(file.data.clone())
            },
            Some(&etag),
        );
        if fresh {
            *res.status_mut() = StatusCode::NOT_MODIFIED;
        }
        return res;
    }
    let content_type = content_type(file);
    let mut res = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        Response::new(Body::from(file.data.clone()))
    };
    let h = res.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    res
}

fn content_type(file: &rust_embed::EmbeddedFile) -> String {
    let mime = file.metadata.mimetype();
    if mime.starts_with("text/") || mime.contains("javascript") || mime.ends_with("+xml") {
        format!("{mime}; charset=utf-8")
    } else {
        mime.to_string()
    }
}

fn accepts_gzip(req: &HeaderMap) -> bool {
    req.get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|enc| {
            let mut parts = enc.split(';');
            let name = parts.next().unwrap_or("").trim();
            let q_zero = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    == Some(0.0)
            });
            name.eq_ignore_ascii_case("gzip") && !q_zero
        })
}

/// The HTML page (the UI's index.html or the placeholder), never cached without revalidation.
fn page(body: Body, etag: Option<&str>) -> Response {
    let mut res = Response::new(body);
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if let Some(v) = etag.and_then(|e| HeaderValue::from_str(e).ok()) {
        h.insert(header::ETAG, v);
    }
    res
}

fn api_not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        r#"{"error":{"code":"not_found","message":"no such API route"}}"#,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(path: &str) -> Response {
        serve(Method::GET, path.parse().unwrap(), HeaderMap::new()).await
    }

    fn header_of(res: &Response, name: header::HeaderName) -> String {
        res.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn index_and_spa_paths_are_html_and_never_cached_stale() {
        for path in [
            "/",
            "/index.html",
            "/agents/k3f9x2m1q8ab",
            "/some/unknown/page",
        ] {
            let res = get(path).await;
            assert_eq!(res.status(), StatusCode::OK, "{path}");
            assert!(header_of(&res, header::CONTENT_TYPE).starts_with("text/html"));
            assert_eq!(header_of(&res, header::CACHE_CONTROL), "no-cache");
            assert!(header_of(&res, header::CONTENT_SECURITY_POLICY).contains("default-src 'self'"));
        }
    }

    #[tokio::test]
    async fn api_paths_never_fall_back_to_the_ui() {
        for path in ["/api", "/api/", "/api/v1/nope", "/api/v2/agents"] {
            let res = get(path).await;
            assert_eq!(res.status(), StatusCode::NOT_FOUND, "{path}");
            assert_eq!(header_of(&res, header::CONTENT_TYPE), "application/json");
        }
        let res = serve(
            Method::POST,
            "/api/v1/nope".parse().unwrap(),
            HeaderMap::new(),
        )
        .await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn missing_assets_are_404_not_html() {
        let res = get("/assets/missing-0000.js").await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
        let res = get("/assets/../../Cargo.toml").await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn other_methods_are_refused() {
        let res = serve(Method::POST, "/".parse().unwrap(), HeaderMap::new()).await;
        assert_eq!(res.status(), StatusCode::METHOD_NOT_ALLOWED);
    }

    #[tokio::test]
    async fn built_assets_have_types_long_cache_and_etags() {
        let Some(js) = Assets::iter().find(|p| p.starts_with("assets/") && p.ends_with(".js"))
        else {
            return; // UI not built: nothing to check here
        };
        let res = get(&format!("/{js}")).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert!(header_of(&res, header::CONTENT_TYPE).contains("javascript"));
        assert_eq!(header_of(&res, header::CACHE_CONTROL), IMMUTABLE);
        let etag = header_of(&res, header::ETAG);
        assert!(etag.starts_with('"'));
        let mut h = HeaderMap::new();
        h.insert(header::IF_NONE_MATCH, etag.parse().unwrap());
        let res = serve(Method::GET, format!("/{js}").parse().unwrap(), h).await;
        assert_eq!(res.status(), StatusCode::NOT_MODIFIED);

        if Assets::get(&format!("{js}.gz")).is_some() {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, "br, gzip".parse().unwrap());
            let res = serve(Method::GET, format!("/{js}").parse().unwrap(), h).await;
            assert_eq!(header_of(&res, header::CONTENT_ENCODING), "gzip");
            assert!(header_of(&res, header::CONTENT_TYPE).contains("javascript"));
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, "gzip;q=0".parse().unwrap());
            let res = serve(Method::GET, format!("/{js}").parse().unwrap(), h).await;
            assert_eq!(header_of(&res, header::CONTENT_ENCODING), "");
        }
    }
}
