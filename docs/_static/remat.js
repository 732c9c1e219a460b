// Lets long code names in the sidebars break after an underscore rather than anywhere.
document.addEventListener("DOMContentLoaded", () => {
  const names = document.querySelectorAll(
    ".bd-sidebar-primary code span.pre, .bd-sidebar-secondary code span.pre");
  for (const span of names) {
    const parts = span.textContent.split("_");
    if (parts.length < 2) continue;
    span.textContent = "";
    parts.forEach((part, i) => {
      span.append(i < parts.length - 1 ? part + "_" : part);
      if (i < parts.length - 1) span.append(document.createElement("wbr"));
    });
  }
});

// Both themes bind their sidebar toggles to the first .primary-toggle and .secondary-toggle
// of the page (document.querySelector), which is the header's, hidden by sphinx-book-theme's
// layout; the buttons a reader sees, in the article's header, were bound to nothing. A click
// on any other toggle is passed to the first one, which opens the drawer on a phone and
// hides or shows the sidebar on a desktop.
document.addEventListener("DOMContentLoaded", () => {
  for (const selector of [".primary-toggle", ".secondary-toggle"]) {
    const [bound, ...others] = document.querySelectorAll(selector);
    for (const button of others) {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        bound.click();
      });
    }
  }
});
