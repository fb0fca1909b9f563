// What report.html laid out (tests/report/browser.py appends this to a copy of the page):
// per plot its axes, the measured points and the no-value marks; every link to a log.
const plots = [];
for (const svg of document.querySelectorAll('svg.plot')) {
  // the axes: the grey lines (the x axis is the lowest horizontal one, the y axis's top the plot's top)
  const grey = [...svg.querySelectorAll('line')].filter(l => l.getAttribute('stroke') === '#888');
  const horiz = grey.filter(l => l.getAttribute('y1') === l.getAttribute('y2'));
  const vert = grey.filter(l => l.getAttribute('x1') === l.getAttribute('x2'));
  const y0 = Math.max(...horiz.map(l => +l.getAttribute('y1')));
  const top = Math.min(...vert.map(l => Math.min(+l.getAttribute('y1'), +l.getAttribute('y2'))));
  const idx = el => { const t = el.querySelector('title'); const m = t && /^#(\d+)/.exec(t.textContent); return m ? +m[1] : null; };
  const box = el => { const b = el.getBBox(); return {x: b.x, y: b.y, w: b.width, h: b.height}; };
  plots.push({
    title: svg.getAttribute('aria-label'),
    width: svg.getBoundingClientRect().width,
    y0, top,
    points: [...svg.querySelectorAll('circle')].map(c => ({i: idx(c), cls: c.getAttribute('class'), cy: +c.getAttribute('cy'), box: box(c)})),
    novalue: [...svg.querySelectorAll('.no-value')].map(e => ({i: idx(e), tag: e.tagName, cls: e.getAttribute('class'), box: box(e)})),
    skipmarks: [...svg.querySelectorAll('.skip')].map(e => ({i: idx(e), tag: e.tagName, box: box(e)})),
  });
}
const links = [...document.querySelectorAll('a.log')].map(a => ({href: a.href, text: a.textContent, w: a.getBoundingClientRect().width}));
window.probeResult = {plots, links};
