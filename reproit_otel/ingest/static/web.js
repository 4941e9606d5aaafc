// reproit-otel ingest page: copy buttons. Everything else is rendered by the server.
"use strict";

function copyText(value) {
  if (navigator.clipboard && window.isSecureContext) {
    return navigator.clipboard.writeText(value);
  }
  // Pages served over plain HTTP on a LAN address have no Clipboard API.
  return new Promise(function (resolve, reject) {
    var area = document.createElement("textarea");
    area.value = value;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    var done = false;
    try {
      done = document.execCommand("copy");
    } catch (error) {
      done = false;
    }
    document.body.removeChild(area);
    if (done) {
      resolve();
    } else {
      reject(new Error("copy refused"));
    }
  });
}

function wireCopyButtons() {
  var buttons = document.querySelectorAll("button[data-copy]");
  Array.prototype.forEach.call(buttons, function (button) {
    button.addEventListener("click", function () {
      var source = document.getElementById(button.getAttribute("data-copy"));
      if (!source) {
        return;
      }
      copyText(source.textContent).then(
        function () {
          button.textContent = "Copied";
          button.classList.add("done");
        },
        function () {
          button.textContent = "Select and copy";
          var range = document.createRange();
          range.selectNodeContents(source);
          var selection = window.getSelection();
          selection.removeAllRanges();
          selection.addRange(range);
        }
      );
      window.setTimeout(function () {
        button.textContent = "Copy";
        button.classList.remove("done");
      }, 2000);
    });
  });
}

document.addEventListener("DOMContentLoaded", wireCopyButtons);
