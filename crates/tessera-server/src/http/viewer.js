// tessera's built-in tile viewer: pans and zooms any tile matrix set the
// server describes (Web Mercator, CRS84 and custom grids) with no library
// and no network access beyond this server.
(function () {
  "use strict";
  const cfg = JSON.parse(document.getElementById("tessera-config").textContent);
  const map = document.getElementById("map");
  const status = document.getElementById("status");
  const gridSelect = document.getElementById("grid");
  const formatSelect = document.getElementById("format");
  const tiles = new Map();
  let grid = cfg.grids[0];
  let format = cfg.formats[0];
  let z = 0, cx = 0, cy = 0;
  let moved = false; // until the user pans or zooms, resizing re-fits the layer

  for (const g of cfg.grids) gridSelect.add(new Option(g.id, g.id));
  for (const f of cfg.formats) formatSelect.add(new Option(f, f));
  // One list per dimension (time, elevation, ...); tiles carry the values.
  const chosen = {};
  for (const d of cfg.dimensions || []) {
    const select = document.createElement("select");
    select.id = `dimension-${d.name}`;
    select.title = d.name;
    for (const v of d.values) select.add(new Option(`${d.name} ${v}`, v));
    select.value = chosen[d.name] = d.default;
    select.onchange = () => { chosen[d.name] = select.value; redraw(); };
    document.getElementById("dimensions").appendChild(select);
  }
  function query() {
    const q = Object.entries(chosen).map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`);
    return q.length ? `?${q.join("&")}` : "";
  }
  function redraw() {
    for (const img of tiles.values()) img.remove();
    tiles.clear();
    draw();
  }

  function fit() {
    const e = grid.extent;
    const w = map.clientWidth, h = map.clientHeight;
    z = grid.minZoom;
    for (let i = grid.minZoom; i <= grid.maxZoom; i++) {
      const r = grid.matrices[i].res;
      if ((e[2] - e[0]) / r <= w && (e[3] - e[1]) / r <= h) z = i; else break;
    }
    cx = (e[0] + e[2]) / 2;
    cy = (e[1] + e[3]) / 2;
  }

  function draw() {
    const w = map.clientWidth, h = map.clientHeight;
    const m = grid.matrices[z], r = m.res, tw = grid.tileWidth, th = grid.tileHeight;
    const left = (cx - grid.originX) / r - w / 2;
    const top = (grid.originY - cy) / r - h / 2;
    const c0 = Math.max(0, Math.floor(left / tw)), c1 = Math.min(m.w - 1, Math.floor((left + w) / tw));
    const r0 = Math.max(0, Math.floor(top / th)), r1 = Math.min(m.h - 1, Math.floor((top + h) / th));
    const keep = new Set();
    for (let y = r0; y <= r1; y++) {
      for (let x = c0; x <= c1; x++) {
        const key = `${grid.id}/${z}/${x}/${y}.${format}${query()}`;
        keep.add(key);
        let img = tiles.get(key);
        if (!img) {
          img = new Image(tw, th);
          img.className = "tile";
          img.alt = "";
          img.onload = () => { img.dataset.loaded = "1"; };
          img.src = `${cfg.tileBase}/${key}`;
          tiles.set(key, img);
          map.appendChild(img);
        }
        img.style.left = `${Math.round(x * tw - left)}px`;
        img.style.top = `${Math.round(y * th - top)}px`;
      }
    }
    for (const [key, img] of tiles) {
      if (!keep.has(key)) { img.remove(); tiles.delete(key); }
    }
    status.textContent = `${grid.id} zoom ${z}  centre ${centre()}  view ${w}x${h}`;
  }

  // The centre as people read it: longitude, latitude where the grid's
  // CRS allows, else its own coordinates and CRS.
  function centre() {
    let lon = cx, lat = cy;
    if (grid.lonlat === "mercator") {
      const R = 6378137;
      lon = (cx / R) * 180 / Math.PI;
      lat = (2 * Math.atan(Math.exp(cy / R)) - Math.PI / 2) * 180 / Math.PI;
    } else if (grid.lonlat !== "degrees") {
      return `${cx.toFixed(1)}, ${cy.toFixed(1)} (${grid.crs})`;
    }
    const ns = lat >= 0 ? "N" : "S", ew = lon >= 0 ? "E" : "W";
    return `${Math.abs(lat).toFixed(4)}°${ns} ${Math.abs(lon).toFixed(4)}°${ew}`;
  }

  function zoomAt(dz, px, py) {
    const nz = Math.min(grid.maxZoom, Math.max(grid.minZoom, z + dz));
    if (nz === z) return;
    const w = map.clientWidth, h = map.clientHeight;
    const r0 = grid.matrices[z].res, r1 = grid.matrices[nz].res;
    const mx = cx + (px - w / 2) * r0, my = cy - (py - h / 2) * r0;
    cx = mx - (px - w / 2) * r1;
    cy = my + (py - h / 2) * r1;
    z = nz;
    moved = true;
    draw();
  }

  let drag = null;
  map.addEventListener("pointerdown", (e) => { drag = { x: e.clientX, y: e.clientY }; map.setPointerCapture(e.pointerId); });
  map.addEventListener("pointermove", (e) => {
    if (!drag) return;
    const r = grid.matrices[z].res;
    cx -= (e.clientX - drag.x) * r;
    cy += (e.clientY - drag.y) * r;
    drag = { x: e.clientX, y: e.clientY };
    moved = true;
    draw();
  });
  map.addEventListener("pointerup", () => { drag = null; });
  map.addEventListener("wheel", (e) => {
    e.preventDefault();
    const rect = map.getBoundingClientRect();
    zoomAt(e.deltaY < 0 ? 1 : -1, e.clientX - rect.left, e.clientY - rect.top);
  }, { passive: false });
  map.addEventListener("dblclick", (e) => {
    const rect = map.getBoundingClientRect();
    zoomAt(1, e.clientX - rect.left, e.clientY - rect.top);
  });
  document.getElementById("zoom-in").onclick = () => zoomAt(1, map.clientWidth / 2, map.clientHeight / 2);
  document.getElementById("zoom-out").onclick = () => zoomAt(-1, map.clientWidth / 2, map.clientHeight / 2);
  gridSelect.onchange = () => {
    grid = cfg.grids.find((g) => g.id === gridSelect.value);
    for (const img of tiles.values()) img.remove();
    tiles.clear();
    fit();
    draw();
  };
  formatSelect.onchange = () => { format = formatSelect.value; draw(); };
  window.addEventListener("resize", () => { if (!moved) fit(); draw(); });
  fit();
  draw();
})();
