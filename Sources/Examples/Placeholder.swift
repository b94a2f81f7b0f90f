enum ExamplesPlaceholder {}
