"""Reading run folders back: figures (`plots`), the HTML report (`html`) and CI regression checks
(`check`). Nothing here loads a model, so reports and checks run anywhere the tables can be read."""
