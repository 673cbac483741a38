//! `GET /book/...`: the manual (the mdBook `scripts/docs` builds), served
//! from `server.book` so that the HTML pages and error messages can link
//! into it (`docs: security#limits` is `/book/security.html#limits`).

use std::path::{Component, Path, PathBuf};

use axum::extract::{Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

use super::state::Catalog;

/// Largest file served from the book (its search index is the largest,
/// about a megabyte).
const MOST_BYTES: u64 = 32 << 20;

/// The URL path the book is served under.
pub const BOOK_PATH: &str = "/book/";

/// `GET /book`: to `/book/`, so that the book's relative links resolve.
pub async fn redirect() -> Redirect {
    Redirect::permanent(BOOK_PATH)
}

/// `GET /book/`: the book's first page.
pub async fn index(State(state): State<Catalog>) -> Response {
    serve(&state.config.server.book, "index.html").await
}

/// `GET /book/{*path}`: a file of the book.
pub async fn file(State(state): State<Catalog>, UrlPath(path): UrlPath<String>) -> Response {
    serve(&state.config.server.book, &path).await
}

/// `path` (relative, `/`-separated) inside the book at `dir`: its bytes
/// with their content type, a 404 for a file that is not there (the
/// book's own 404 page when it has one), or a page saying how to build
/// the book when `dir` is not a book.
async fn serve(dir: &Path, path: &str) -> Response {
    if !dir.join("index.html").is_file() {
        return not_installed(dir);
    }
    let Some(file) = inside(dir, path) else {
        return missing(dir).await;
    };
    let read = async {
        let meta = tokio::fs::metadata(&file).await?;
        if !meta.is_file() || meta.len() > MOST_BYTES {
            return Err(std::io::ErrorKind::NotFound.into());
        }
        tokio::fs::read(&file).await
    };
    match read.await {
        Ok(bytes) => (
            [
                (header::CONTENT_TYPE, content_type(&file)),
                (header::CACHE_CONTROL, "public, max-age=300"),
            ],
            bytes,
        )
            .into_response(),
        Err(_) => missing(dir).await,
    }
}

/// `path` joined onto `dir` when every part of it is a plain name (no
/// `..`, no root, no hidden file) and the result, links followed, stays
/// inside `dir`.
fn inside(dir: &Path, path: &str) -> Option<PathBuf> {
    let relative = Path::new(path);
    let plain = relative.components().all(|c| match c {
        Component::Normal(name) => !name.to_string_lossy().starts_with('.'),
        _ => false,
    });
    if path.is_empty() || path.contains('\\') || !plain {
        return None;
    }
    let joined = dir.join(relative);
    let real = joined.canonicalize().ok()?;
    real.starts_with(dir.canonicalize().ok()?).then_some(real)
}

/// The book's 404 page, with status 404.
async fn missing(dir: &Path) -> Response {
    let page = tokio::fs::read(dir.join("404.html"))
        .await
        .unwrap_or_else(|_| b"not in the manual\n".to_vec());
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        page,
    )
        .into_response()
}

/// A 404 saying where the book is looked for and how to get it there.
fn not_installed(dir: &Path) -> Response {
    let dir = dir
        .display()
        .to_string()
        .replace('&', "&amp;")
        .replace('<', "&lt;");
    let page = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>The manual</title></head><body>\n\
         <h1>The manual is not installed here</h1>\n\
         <p>tessera looks for it in <code>{dir}</code> (<code>server.book</code>, or \
         <code>tessera serve --book DIR</code>). The Debian package installs it there; from a source \
         checkout, <code>scripts/docs</code> builds it into <code>target/book</code> \
         (<code>scripts/serve</code> does, and serves it).</p>\n</body></html>\n"
    );
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        page,
    )
        .into_response()
}

/// The content type of a book's file, by its extension.
fn content_type(file: &Path) -> &'static str {
    match file.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff" => "font/woff",
        "woff2" => "font/woff2",
        "ttf" => "font/ttf",
        "otf" => "font/otf",
        "eot" => "application/vnd.ms-fontobject",
        "txt" | "md" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_inside_the_book_are_served() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("css")).unwrap();
        std::fs::write(dir.path().join("css/a.css"), "x").unwrap();
        std::fs::write(dir.path().join(".secret"), "x").unwrap();
        assert!(inside(dir.path(), "css/a.css").is_some());
        for bad in [
            "../etc/passwd",
            "/etc/passwd",
            "css/../../x",
            ".secret",
            "",
            "css\\a.css",
            "nope.html",
        ] {
            assert!(inside(dir.path(), bad).is_none(), "{bad}");
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc", dir.path().join("out")).unwrap();
            assert!(inside(dir.path(), "out/hostname").is_none());
        }
    }
}
