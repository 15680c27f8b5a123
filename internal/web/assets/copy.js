// Copy buttons: beside each value marked data-copy (a tracking link, a key
// or secret shown once, a postback URL), a button that puts the value on
// the clipboard. Without JavaScript, or where the browser has no Clipboard
// API, the value is plain text to select and copy by hand.
"use strict";
(() => {
  if (!navigator.clipboard) return;
  for (const value of document.querySelectorAll("[data-copy]")) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "secondary copy";
    button.textContent = "Copy";
    button.setAttribute("aria-live", "polite");
    let reset;
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(value.textContent.trim());
        button.textContent = "Copied";
      } catch {
        button.textContent = "Select it to copy";
      }
      clearTimeout(reset);
      reset = setTimeout(() => { button.textContent = "Copy"; }, 2500);
    });
    value.after(button);
  }
})();
