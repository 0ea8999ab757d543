// Search results quote the page's article. Sphinx's search takes its snippet from the page's [role="main"],
// which in sphinx-book-theme also holds the header's buttons, the theme switcher and the "Contents" list: the
// snippet would begin with that text. Loaded (deferred) on the search page only, after searchtools.js.
if (typeof Search !== "undefined") {
  const wholeMain = Search.htmlToText;
  Search.htmlToText = (htmlString, anchor) => {
    const page = new DOMParser().parseFromString(htmlString, "text/html");
    const main = page.querySelector('[role="main"]');
    const article = page.querySelector("article.bd-article");
    if (!main || !article) return wholeMain(htmlString, anchor);
    main.removeAttribute("role");
    article.setAttribute("role", "main");
    return wholeMain(page.documentElement.outerHTML, anchor);
  };
}
