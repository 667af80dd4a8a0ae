// Enter in the prompt generates (a presenter types and presses Enter); Ctrl+Enter (or Shift+Enter,
// which Gradio also takes as submit) is a new line. Keys pressed while an input method composes
// (CJK) are left alone. Handed whole to the page as its script (ui.constants.PROMPT_KEYS).
() => {
  document.addEventListener("keydown", (event) => {
    const box = event.target;
    if (event.key !== "Enter" || event.isComposing || !box.closest || !box.closest("#prompt")) return;
    if (event.ctrlKey || event.metaKey) {
      event.preventDefault();
      const at = box.selectionStart;
      box.value = box.value.slice(0, at) + "\n" + box.value.slice(box.selectionEnd);
      box.selectionStart = box.selectionEnd = at + 1;
      box.dispatchEvent(new Event("input", {bubbles: true}));
    } else if (!event.shiftKey && !event.altKey) {
      event.preventDefault();
      event.stopPropagation();
      const button = document.querySelector("#generate");
      if (button && !button.disabled) button.click();
    }
  }, true);
}
