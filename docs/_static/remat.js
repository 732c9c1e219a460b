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
