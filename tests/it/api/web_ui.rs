//! The web UI beside the API: its pages are served, and an API path never falls back to them.

use crate::common::{expect_error, TestServer};

#[tokio::test]
async fn the_web_ui_is_served_and_api_paths_never_fall_back_to_it() {
    let s = TestServer::start().await;
    let r = s.http.get(s.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let r = s.http.get(s.url("/agents/some-page")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = s.get("/api/v1/not-a-route").send().await.unwrap();
    expect_error(r, 404, "not_found").await;
}
