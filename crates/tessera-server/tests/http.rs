//! In-process HTTP tests: every request-side item of RELIABILITY.md that
//! applies to the tile, WMTS, WMS, TileJSON and preview endpoints, against
//! the embedded demo layers rendered by the real GDAL.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::sync::OnceLock;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode, header};
use tessera_server::{Service, demo, http};
use tower::ServiceExt;

fn app_with(edit: impl FnOnce(&mut tessera_server::Config)) -> Router {
    let mut config = demo::demo_config().expect("demo config");
    edit(&mut config);
    http::router(http::AppState::new(
        Service::serving(config).expect("service"),
    ))
}

fn app() -> Router {
    static APP: OnceLock<Router> = OnceLock::new();
    APP.get_or_init(|| app_with(|_| {})).clone()
}

struct Reply {
    status: StatusCode,
    content_type: String,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

async fn get_with(app: Router, uri: &str) -> Reply {
    let response = app
        .oneshot(
            Request::get(uri)
                .header(header::HOST, "tiles.example:8080")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = to_bytes(response.into_body(), 64 << 20)
        .await
        .unwrap()
        .to_vec();
    Reply {
        status,
        content_type,
        headers,
        body,
    }
}

async fn get(uri: &str) -> Reply {
    get_with(app(), uri).await
}

fn decode_png(bytes: &[u8]) -> (u32, u32, png::ColorType, Vec<u8>) {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    buf.truncate(info.buffer_size());
    (info.width, info.height, info.color_type, buf)
}

const WMS13: &str =
    "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&LAYERS=relief&STYLES=&FORMAT=image/png";
const WMS11: &str =
    "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.1.1&LAYERS=relief&STYLES=&FORMAT=image/png";

#[tokio::test]
async fn a_valid_xyz_tile_is_a_png_of_the_grid_tile_size() {
    let r = get("/tiles/relief/WebMercatorQuad/2/2/1.png").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.content_type, "image/png");
    let (w, h, ..) = decode_png(&r.body);
    assert_eq!((w, h), (256, 256));
}

#[tokio::test]
async fn extension_and_content_type_agree_for_every_format() {
    for (ext, ct, magic) in [
        ("png", "image/png", &b"\x89PNG"[..]),
        ("jpg", "image/jpeg", &b"\xFF\xD8\xFF"[..]),
        ("webp", "image/webp", &b"RIFF"[..]),
    ] {
        let r = get(&format!("/tiles/relief/WorldCRS84Quad/1/1/0.{ext}")).await;
        assert_eq!(r.status, StatusCode::OK, "{ext}");
        assert_eq!(r.content_type, ct);
        assert!(r.body.starts_with(magic), "{ext}");
    }
}

#[tokio::test]
async fn tms_rows_count_from_the_bottom() {
    let xyz = get("/tiles/relief/WebMercatorQuad/2/1/0.png").await;
    let tms = get("/tms/1.0.0/relief/WebMercatorQuad/2/1/3.png").await;
    assert_eq!(tms.status, StatusCode::OK);
    assert_eq!(xyz.body, tms.body);
    assert_eq!(
        get("/tms/1.0.0/relief/WebMercatorQuad/2/1/4.png")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn out_of_range_and_malformed_tile_coordinates_are_4xx_never_5xx() {
    let cases = [
        (
            "/tiles/relief/WebMercatorQuad/9/0/0.png",
            StatusCode::NOT_FOUND,
        ), // above layer max_zoom 8
        (
            "/tiles/relief/WebMercatorQuad/2/4/0.png",
            StatusCode::NOT_FOUND,
        ),
        (
            "/tiles/relief/WebMercatorQuad/2/0/4.png",
            StatusCode::NOT_FOUND,
        ),
        (
            "/tiles/relief/WebMercatorQuad/31/0/0.png",
            StatusCode::NOT_FOUND,
        ),
        (
            "/tiles/relief/WebMercatorQuad/32/0/0.png",
            StatusCode::NOT_FOUND,
        ),
        (
            "/tiles/relief/WebMercatorQuad/63/0/0.png",
            StatusCode::NOT_FOUND,
        ),
        (
            "/tiles/relief/WebMercatorQuad/255/0/0.png",
            StatusCode::NOT_FOUND,
        ),
        (
            "/tiles/relief/WebMercatorQuad/-1/0/0.png",
            StatusCode::BAD_REQUEST,
        ),
        (
            "/tiles/relief/WebMercatorQuad/1/-1/0.png",
            StatusCode::BAD_REQUEST,
        ),
        (
            "/tiles/relief/WebMercatorQuad/1/0.5/0.png",
            StatusCode::BAD_REQUEST,
        ),
        (
            "/tiles/relief/WebMercatorQuad/1/0/0.5.png",
            StatusCode::BAD_REQUEST,
        ),
        (
            "/tiles/relief/WebMercatorQuad/1/1e1/0.png",
            StatusCode::BAD_REQUEST,
        ),
        (
            "/tiles/relief/WebMercatorQuad/1/0/99999999999999999999.png",
            StatusCode::BAD_REQUEST,
        ),
        (
            "/tiles/relief/WebMercatorQuad/18446744073709551616/0/0.png",
            StatusCode::BAD_REQUEST,
        ),
        (
            "/tiles/relief/WorldCRS84Quad/0/2/0.png",
            StatusCode::NOT_FOUND,
        ),
    ];
    for (uri, want) in cases {
        let r = get(uri).await;
        assert_eq!(r.status, want, "{uri}: {}", r.text());
    }
}

#[tokio::test]
async fn layer_zoom_limits_apply_to_tiles() {
    // The elevation layer serves zoom 0..=14.
    assert_eq!(
        get("/tiles/elevation/WebMercatorQuad/14/8466/5604.png")
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        get("/tiles/elevation/WebMercatorQuad/15/16932/11208.png")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let app = app_with(|c| c.layers[0].min_zoom = 2);
    assert_eq!(
        get_with(app, "/tiles/relief/WebMercatorQuad/1/0/0.png")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn unknown_layer_grid_and_format_are_404_with_the_name_escaped() {
    let r = get("/tiles/nope%3Cscript%3E/WebMercatorQuad/0/0/0.png").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.text().contains("\"nope<script>\""), "{}", r.text());
    assert!(r.content_type.starts_with("text/plain"));
    assert_eq!(
        r.headers.get(header::X_CONTENT_TYPE_OPTIONS).unwrap(),
        "nosniff"
    );
    assert_eq!(
        get("/tiles/relief/NoSuchGrid/0/0/0.png").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get("/tiles/relief/WebMercatorQuad/0/0/0.gif").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get("/tiles/relief/WebMercatorQuad/0/0/0").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn traversal_and_nul_segments_are_rejected() {
    for uri in [
        "/tiles/..%2F..%2Fetc/WebMercatorQuad/0/0/0.png",
        "/tiles/%2e%2e/WebMercatorQuad/0/0/0.png",
        "/tiles/relief%00/WebMercatorQuad/0/0/0.png",
        "/tiles/%2Fetc%2Fpasswd/WebMercatorQuad/0/0/0.png",
        "/tiles/relief/..%2F..%2F/0/0/0.png",
        "/preview/..%2F..%2Fetc%2Fpasswd",
        "/wmts/1.0.0/%2e%2e/default/WebMercatorQuad/0/0/0.png",
    ] {
        let r = get(uri).await;
        assert!(r.status.is_client_error(), "{uri}: {}", r.status);
        assert!(!r.text().contains("root:"), "{uri}");
    }
}

#[tokio::test]
async fn irrelevant_query_strings_do_not_change_the_tile() {
    let plain = get("/tiles/relief/WebMercatorQuad/1/0/0.png").await.body;
    for i in 0..50 {
        let r = get(&format!(
            "/tiles/relief/WebMercatorQuad/1/0/0.png?cachebust={i}&x=y{i}"
        ))
        .await;
        assert_eq!(r.body, plain);
    }
}

#[tokio::test]
async fn wms_getmap_returns_an_image_of_the_requested_size() {
    let r = get(&format!(
        "{WMS13}&CRS=EPSG:3857&BBOX=-2000000,-1000000,2000000,1000000&WIDTH=300&HEIGHT=150"
    ))
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let (w, h, color, _) = decode_png(&r.body);
    assert_eq!((w, h, color), (300, 150, png::ColorType::Rgb));
}

#[tokio::test]
async fn wms_epsg4326_axis_order_differs_by_version_but_gives_the_same_picture() {
    let v13 = get(&format!(
        "{WMS13}&CRS=EPSG:4326&BBOX=30,-10,50,20&WIDTH=120&HEIGHT=80"
    ))
    .await;
    let v11 = get(&format!(
        "{WMS11}&SRS=EPSG:4326&BBOX=-10,30,20,50&WIDTH=120&HEIGHT=80"
    ))
    .await;
    let crs84 = get(&format!(
        "{WMS13}&CRS=CRS:84&BBOX=-10,30,20,50&WIDTH=120&HEIGHT=80"
    ))
    .await;
    assert_eq!(v13.status, StatusCode::OK);
    assert_eq!(v13.body, v11.body);
    assert_eq!(v13.body, crs84.body);
}

#[tokio::test]
async fn wms_parameter_names_match_in_any_case() {
    let r = get("/wms?service=wms&Request=GetMap&version=1.3.0&layers=relief&styles=&crs=EPSG:3857&bbox=0,0,1000000,1000000&width=64&height=64&format=image/jpeg").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.content_type, "image/jpeg");
}

#[tokio::test]
async fn wms_bad_bbox_values_are_exception_reports() {
    for bbox in [
        "10,0,0,10",
        "0,0,0,10",
        "0,0,10,0",
        "NaN,0,10,10",
        "0,0,inf,10",
        "0,0,1e400,10",
        "0,0,10",
        "0,0,10,10,20",
        "a,b,c,d",
        "",
    ] {
        let r = get(&format!(
            "{WMS13}&CRS=EPSG:3857&BBOX={bbox}&WIDTH=10&HEIGHT=10"
        ))
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bbox}");
        assert!(r.content_type.starts_with("text/xml"), "{bbox}");
        let t = r.text();
        assert!(
            t.contains("ServiceExceptionReport") && t.contains("locator=\"BBOX\""),
            "{bbox}: {t}"
        );
    }
}

#[tokio::test]
async fn wms_bad_sizes_are_refused_before_rendering() {
    for (w, h) in [
        ("0", "10"),
        ("-5", "10"),
        ("1.5", "10"),
        ("10", "abc"),
        ("4097", "10"),
        ("10", "99999999999"),
    ] {
        let r = get(&format!(
            "{WMS13}&CRS=EPSG:3857&BBOX=0,0,10,10&WIDTH={w}&HEIGHT={h}"
        ))
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{w}x{h}");
        assert!(r.text().contains("InvalidParameterValue"), "{w}x{h}");
    }
    // Within width and height limits but over the pixel limit.
    let app = app_with(|c| c.limits.wms_max_pixels = 1000);
    let r = get_with(
        app,
        &format!("{WMS13}&CRS=EPSG:3857&BBOX=0,0,10,10&WIDTH=100&HEIGHT=100"),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text().contains("limit is 1000"), "{}", r.text());
}

#[tokio::test]
async fn a_vertical_crs_is_a_client_error_not_a_server_error() {
    let r = get(&format!(
        "{WMS13}&CRS=EPSG:5773&BBOX=0,0,10,10&WIDTH=10&HEIGHT=10"
    ))
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    assert!(r.text().contains("code=\"InvalidCRS\""), "{}", r.text());
    let r = get(&format!(
        "{WMS11}&SRS=EPSG:5773&BBOX=0,0,10,10&WIDTH=10&HEIGHT=10"
    ))
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    assert!(r.text().contains("code=\"InvalidSRS\""), "{}", r.text());
}

#[tokio::test]
async fn wms_unknown_crs_is_invalid_crs_in_1_3_0_and_invalid_srs_in_1_1_1() {
    let r = get(&format!(
        "{WMS13}&CRS=EPSG:999999&BBOX=0,0,10,10&WIDTH=10&HEIGHT=10"
    ))
    .await;
    assert!(r.text().contains("code=\"InvalidCRS\""), "{}", r.text());
    assert!(r.text().contains("xmlns=\"http://www.opengis.net/ogc\""));
    let r = get(&format!(
        "{WMS11}&SRS=EPSG:999999&BBOX=0,0,10,10&WIDTH=10&HEIGHT=10"
    ))
    .await;
    assert!(r.text().contains("code=\"InvalidSRS\""), "{}", r.text());
    assert!(r.content_type.starts_with("application/vnd.ogc.se_xml"));
}

#[tokio::test]
async fn wms_unknown_layer_style_and_format_have_their_ogc_codes() {
    let base = "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&CRS=EPSG:3857&BBOX=0,0,10,10&WIDTH=10&HEIGHT=10";
    let r = get(&format!("{base}&LAYERS=x%3C%26y&STYLES=&FORMAT=image/png")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.text().contains("code=\"LayerNotDefined\""));
    assert!(r.text().contains("x&lt;&amp;y"), "{}", r.text());
    let r = get(&format!(
        "{base}&LAYERS=relief&STYLES=fancy&FORMAT=image/png"
    ))
    .await;
    assert!(
        r.text().contains("code=\"StyleNotDefined\""),
        "{}",
        r.text()
    );
    let r = get(&format!("{base}&LAYERS=relief&STYLES=&FORMAT=image/gif")).await;
    assert!(r.text().contains("code=\"InvalidFormat\""), "{}", r.text());
}

#[tokio::test]
async fn wms_conflicting_duplicate_parameters_are_refused() {
    let r = get(&format!(
        "{WMS13}&CRS=EPSG:3857&BBOX=0,0,10,10&WIDTH=10&HEIGHT=10&width=20"
    ))
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text().contains("WIDTH is given twice"), "{}", r.text());
    let r = get(&format!(
        "{WMS13}&CRS=EPSG:3857&BBOX=0,0,10,10&WIDTH=10&HEIGHT=10&width=10"
    ))
    .await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn wms_transparent_and_bgcolor_control_the_background() {
    // Outside every source: the picture is background only.
    let q = "&CRS=EPSG:3857&BBOX=-19000000,-19000000,-18000000,-18000000&WIDTH=8&HEIGHT=8&LAYERS=elevation";
    let base = "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&STYLES=&FORMAT=image/png";
    let (_, _, color, px) = decode_png(&get(&format!("{base}{q}&TRANSPARENT=TRUE")).await.body);
    assert_eq!(color, png::ColorType::Rgba);
    assert!(px.chunks(4).all(|p| p[3] == 0));
    let (_, _, color, px) = decode_png(&get(&format!("{base}{q}&BGCOLOR=0x102030")).await.body);
    assert_eq!(color, png::ColorType::Rgb);
    assert_eq!(&px[..3], &[0x10, 0x20, 0x30]);
    let r = get(&format!("{base}{q}&BGCOLOR=blue")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = get(&format!("{base}{q}&TRANSPARENT=maybe")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_bbox_outside_the_layer_is_a_transparent_image_not_an_error() {
    let r = get("/tiles/landsat/WebMercatorQuad/3/0/0.png").await;
    assert_eq!(r.status, StatusCode::OK);
    let (_, _, _, px) = decode_png(&r.body);
    assert!(px.chunks(4).all(|p| p[3] == 0));
}

#[tokio::test]
async fn wms_accepts_other_epsg_codes_gdal_knows() {
    // The Landsat scene in its own UTM zone 25S.
    let r = get("/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&LAYERS=landsat&STYLES=&CRS=EPSG:31985&BBOX=9110000,288000,9120000,298000&WIDTH=100&HEIGHT=100&FORMAT=image/png").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let (_, _, _, px) = decode_png(&r.body);
    assert!(px.len() >= 100 * 100 * 3);
}

#[tokio::test]
async fn wms_capabilities_list_layers_and_crs_per_version() {
    let r = get("/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.3.0").await;
    assert_eq!(r.status, StatusCode::OK);
    let t = r.text();
    assert!(t.contains("<WMS_Capabilities version=\"1.3.0\""));
    assert!(t.contains("<Name>elevation</Name>") && t.contains("<CRS>EPSG:31985</CRS>"));
    assert!(t.contains("http://tiles.example:8080/wms?"));
    let r = get("/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.1.1").await;
    assert!(r.text().contains("<WMT_MS_Capabilities version=\"1.1.1\">"));
    assert!(r.text().contains("<SRS>EPSG:4326</SRS>"));
}

#[tokio::test]
async fn wmts_kvp_and_rest_tiles_match_the_xyz_tile() {
    let xyz = get("/tiles/relief/WebMercatorQuad/2/1/2.png").await;
    let kvp = get("/wmts?SERVICE=WMTS&REQUEST=GetTile&VERSION=1.0.0&LAYER=relief&STYLE=default&TILEMATRIXSET=WebMercatorQuad&TILEMATRIX=2&TILEROW=2&TILECOL=1&FORMAT=image/png").await;
    let rest = get("/wmts/1.0.0/relief/default/WebMercatorQuad/2/2/1.png").await;
    assert_eq!(kvp.status, StatusCode::OK, "{}", kvp.text());
    assert_eq!(xyz.body, kvp.body);
    assert_eq!(xyz.body, rest.body);
}

#[tokio::test]
async fn wmts_errors_use_ows_exception_codes() {
    let base = "/wmts?SERVICE=WMTS&REQUEST=GetTile&VERSION=1.0.0&LAYER=relief&STYLE=default&TILEMATRIXSET=WebMercatorQuad&FORMAT=image/png";
    let r = get(&format!("{base}&TILEMATRIX=99&TILEROW=0&TILECOL=0")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.text().contains("exceptionCode=\"InvalidParameterValue\"")
            && r.text().contains("locator=\"TILEMATRIX\""),
        "{}",
        r.text()
    );
    let r = get(&format!("{base}&TILEMATRIX=2&TILEROW=4&TILECOL=0")).await;
    assert!(
        r.text().contains("exceptionCode=\"TileOutOfRange\"")
            && r.text().contains("locator=\"TILEROW\""),
        "{}",
        r.text()
    );
    let r = get(&format!("{base}&TILEMATRIX=2&TILEROW=0&TILECOL=4")).await;
    assert!(r.text().contains("locator=\"TILECOL\""), "{}", r.text());
    let r = get(&format!("{base}&TILEMATRIX=2&TILEROW=-1&TILECOL=0")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = get("/wmts?SERVICE=WMTS&REQUEST=GetTile&VERSION=1.0.0&LAYER=zz&STYLE=default&TILEMATRIXSET=WebMercatorQuad&TILEMATRIX=0&TILEROW=0&TILECOL=0&FORMAT=image/png").await;
    assert!(r.text().contains("locator=\"LAYER\""), "{}", r.text());
    let r = get("/wmts?SERVICE=WMTS&REQUEST=GetTile").await;
    assert!(r.text().contains("MissingParameterValue"), "{}", r.text());
    // A name WMTS does not define is a bad value of REQUEST; one it
    // defines that is not offered is not supported.
    let r = get("/wmts?SERVICE=WMTS&REQUEST=Explode").await;
    assert!(r.text().contains("InvalidParameterValue"), "{}", r.text());
    let r = get("/wmts?SERVICE=WMTS&REQUEST=GetFeatureInfo").await;
    assert!(r.text().contains("OperationNotSupported"), "{}", r.text());
}

#[tokio::test]
async fn wmts_capabilities_describe_grids_with_limits_and_templates() {
    let r = get("/wmts/1.0.0/WMTSCapabilities.xml").await;
    assert_eq!(r.status, StatusCode::OK);
    let t = r.text();
    // The demo's layers serve fewer zooms than their grids: each links a
    // set of its own zooms.
    assert!(t.contains("<ows:Identifier>WorldCRS84Quad:0-8</ows:Identifier>"));
    assert!(t.contains("<TileMatrixSet>WebMercatorQuad:0-14</TileMatrixSet>"));
    assert!(t.contains("urn:ogc:def:wkss:OGC:1.0:GoogleMapsCompatible"));
    assert!(t.contains("<TopLeftCorner>-180 90</TopLeftCorner>"));
    assert!(t.contains("template=\"http://tiles.example:8080/wmts/1.0.0/relief/{Style}/{TileMatrixSet}/{TileMatrix}/{TileRow}/{TileCol}.png\""));
    assert!(t.contains("<TileMatrixLimits><TileMatrix>14</TileMatrix>"));
    assert_eq!(
        get("/wmts?REQUEST=GetCapabilities&SERVICE=WMTS").await.body,
        r.body
    );
}

#[tokio::test]
async fn a_layer_whose_zooms_start_past_a_grids_deepest_does_not_break_capabilities() {
    // WorldCRS84Quad ends at zoom 21; the layer starts at 23.
    let app = app_with(|c| {
        c.layers[0].min_zoom = 23;
        c.layers[0].max_zoom = 24;
    });
    let r = get_with(app, "/wmts/1.0.0/WMTSCapabilities.xml").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.text()
            .contains("<TileMatrixSet>WebMercatorQuad:23-24</TileMatrixSet>")
    );
}

#[tokio::test]
async fn tilejson_describes_the_layer() {
    let r = get("/tiles/elevation/WebMercatorQuad/tilejson.json").await;
    assert_eq!(r.status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["tilejson"], "3.0.0");
    assert_eq!(
        v["tiles"][0],
        "http://tiles.example:8080/tiles/elevation/WebMercatorQuad/{z}/{x}/{y}.png"
    );
    assert_eq!(v["maxzoom"], 14);
    let b = v["bounds"].as_array().unwrap();
    assert!((b[0].as_f64().unwrap() - 5.74).abs() < 0.01);
    assert_eq!(
        get("/tiles/zz/WebMercatorQuad/tilejson.json").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn public_url_overrides_the_host_header_and_bad_hosts_are_ignored() {
    let custom = app_with(|c| c.server.public_url = Some("https://maps.example.org/t/".into()));
    let r = get_with(custom, "/tiles/relief/WebMercatorQuad/tilejson.json").await;
    assert!(
        r.text().contains("https://maps.example.org/t/tiles/relief"),
        "{}",
        r.text()
    );
    let response = app()
        .oneshot(
            Request::get("/wmts/1.0.0/WMTSCapabilities.xml")
                .header(header::HOST, "evil\"><x")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let body = to_bytes(response.into_body(), 1 << 20).await.unwrap();
    assert!(!String::from_utf8_lossy(&body).contains("evil"));
}

#[tokio::test]
async fn preview_index_and_health_pages_are_served() {
    let r = get("/preview/elevation").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.text().contains("/static/viewer.js")
            && r.text().contains("\"tileBase\":\"/tiles/elevation\"")
    );
    assert_eq!(get("/preview/zz").await.status, StatusCode::NOT_FOUND);
    assert!(
        get("/static/viewer.js")
            .await
            .content_type
            .starts_with("text/javascript")
    );
    assert!(get("/").await.text().contains("/preview/landsat"));
    assert_eq!(get("/health").await.status, StatusCode::OK);
    assert_eq!(get("/ready").await.status, StatusCode::OK);
    assert_eq!(get("/nothing/here").await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_render_past_its_timeout_is_503_with_retry_after() {
    let app = app_with(|c| c.server.render_timeout_secs = 1e-9);
    let r = get_with(app, "/tiles/relief/WebMercatorQuad/3/4/2.png").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers.get(header::RETRY_AFTER).unwrap(), "5");
}

#[tokio::test]
async fn a_custom_grid_from_config_serves_tiles_and_appears_in_wmts() {
    let app = app_with(|c| {
        c.grids.push(tessera_grid::GridSpec {
            id: "CRS84-512".into(),
            title: None,
            crs: "EPSG:4326".into(),
            crs_urn: None,
            extent: [-180.0, -90.0, 180.0, 90.0],
            origin: None,
            tile_width: 512,
            tile_height: 512,
            resolutions: Some(vec![0.703_125, 0.351_562_5]),
            scale_denominators: None,
            matrix_sizes: None,
        });
        c.layers[0].grids.push("CRS84-512".into());
    });
    let r = get_with(app.clone(), "/tiles/relief/CRS84-512/1/1/0.png").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let (w, h, ..) = decode_png(&r.body);
    assert_eq!((w, h), (512, 512));
    // 360 / (0.3515625 * 512) = 2 columns, 180 / 180 = 1 row at zoom 1.
    assert_eq!(
        get_with(app.clone(), "/tiles/relief/CRS84-512/1/2/0.png")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get_with(app.clone(), "/tiles/relief/CRS84-512/2/0/0.png")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let caps = get_with(app, "/wmts/1.0.0/WMTSCapabilities.xml")
        .await
        .text();
    assert!(caps.contains("<ows:Identifier>CRS84-512</ows:Identifier>"));
    assert!(caps.contains("<ows:SupportedCRS>urn:ogc:def:crs:EPSG::4326</ows:SupportedCRS>"));
    // EPSG:4326 is latitude first: the corner is written "90 -180".
    assert!(
        caps.contains("<TopLeftCorner>90 -180</TopLeftCorner>"),
        "{caps}"
    );
}
