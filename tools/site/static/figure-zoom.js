// Tap to enlarge: a figure shown smaller than its own size (a phone's narrow column) becomes a link to the image
// file, which the browser shows at full size and lets the reader zoom. Figures already at full size stay as they are.
function linkShrunkFigures() {
  for (const img of document.querySelectorAll(".bd-article img")) {
    if (img.closest("a") || !img.naturalWidth || img.naturalWidth <= img.clientWidth + 1) continue;
    const link = document.createElement("a");
    link.href = img.currentSrc || img.src;
    link.className = "figure-zoom";
    link.title = "Open the figure at full size";
    img.replaceWith(link);
    link.appendChild(img);
  }
}
window.addEventListener("load", linkShrunkFigures);
